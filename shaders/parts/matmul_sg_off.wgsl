// The matmul A-block broadcast without subgroups: each invocation keeps the block it loaded.
fn sg_ablk(x: Ablk) -> Ablk { return x; }
