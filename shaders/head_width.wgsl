// The width of one attention head, joined in front of every attention and KV-cache
// kernel (attention_io.wgsl's three forms, kv_self.wgsl, kv_pages.wgsl's two).
// HD4 (vec4s per head) is a pipeline constant set from the op's head width
// (exec::kernels::HeadWidth): with it fixed when the pipeline is built, the loops over
// a head have a known length, so a compiler can unroll them and keep the query and
// output rows in registers. 0 (the default) reads the width from params.hd instead.

override HD4: u32 = 0u;

// vec4s per head: HD4, or params.hd / 4 where HD4 is 0. Uniform across a dispatch.
fn head_vec4s() -> u32 {
    return select(params.hd / 4u, HD4, HD4 != 0u);
}
