// `mm_coop128d` needs both operands stored in f16 (part `coop_direct_hh`); in the other operand
// forms its loads are these stubs, and the launcher never runs it.
fn da_load_r(f: vec2<u32>) -> coop_mat16x16<f16, A> { return coop_mat16x16<f16, A>(); }
fn da_load_c(f: vec2<u32>) -> coop_mat16x16<f16, A> { return coop_mat16x16<f16, A>(); }
fn db_load_r(f: vec2<u32>) -> coop_mat16x16<f16, B> { return coop_mat16x16<f16, B>(); }
fn db_load_c(f: vec2<u32>) -> coop_mat16x16<f16, B> { return coop_mat16x16<f16, B>(); }
