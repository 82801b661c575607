// The width of one attention head, joined in front of every attention and KV-cache
// kernel (attention_io.wgsl's three forms, kv_self.wgsl, kv_pages.wgsl's two).
// HD4 (vec4s per head) is a pipeline constant set from the op's head width
// (exec::kernels::HeadWidth): with it fixed when the pipeline is built, the loops over
// a head have a known length, so a compiler can unroll them and keep the query and
// output rows in registers. 0 (the default) reads the width from params.hd instead.
//
// MAX_HD4 sizes the kernels' private arrays of a head's row (the query, the output):
// 64, the widest head (256), as written here, where the shaders are validated. The
// executor builds each kernel with this line rewritten to its head's width
// (exec::kernels::HeadWidth::sized), so that a compiler allocates only what the head
// uses: on lavapipe the query-block attention's arrays sized for 256 took 19-37 s of
// LLVM compile per pipeline, also for heads 4 wide. Keep it the file's one definition.
const MAX_HD4: u32 = 64u;

override HD4: u32 = 0u;

// vec4s per head: HD4, or params.hd / 4 where HD4 is 0. Uniform across a dispatch.
fn head_vec4s() -> u32 {
    return select(params.hd / 4u, HD4, HD4 != 0u);
}
