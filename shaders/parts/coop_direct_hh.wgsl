// `mm_coop128d`'s fragment loads (part `coop_direct`) from A and B stored in f16: `_r`
// row-major, `_c` column-major; `f` is `da_frag`'s / `db_frag`'s (first element, stride).
fn da_load_r(f: vec2<u32>) -> coop_mat16x16<f16, A> { return coopLoadT<coop_mat16x16<f16, A>>(&a[f.x], f.y); }
fn da_load_c(f: vec2<u32>) -> coop_mat16x16<f16, A> { return coopLoad<coop_mat16x16<f16, A>>(&a[f.x], f.y); }
fn db_load_r(f: vec2<u32>) -> coop_mat16x16<f16, B> { return coopLoadT<coop_mat16x16<f16, B>>(&b[f.x], f.y); }
fn db_load_c(f: vec2<u32>) -> coop_mat16x16<f16, B> { return coopLoad<coop_mat16x16<f16, B>>(&b[f.x], f.y); }
