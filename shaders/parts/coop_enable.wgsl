// Cooperative matrices (wgpu 30: Features::EXPERIMENTAL_COOPERATIVE_MATRIX) on f16 operands.
enable f16;
enable wgpu_cooperative_matrix;
