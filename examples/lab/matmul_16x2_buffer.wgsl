// Lab (examples/kernel_lab.rs): 16 rows x 2 columns an invocation, B from storage (run with BM 16).
struct Params { m: u32, k: u32, n: u32, e: u32, u1: f32, u2: f32, u3: f32, u4: f32 }
@group(0) @binding(1) var<storage, read_write> a: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> b: array<vec2<f32>>;

// 16 rows x 2 columns per invocation, 32 invocations = 64 columns per workgroup.
@compute @workgroup_size(32)
fn from_buffer(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row0 = wid.y * 16u;
    let c2 = wid.x * 32u + lid.x;
    let k4 = params.k / 4u;
    let n2 = params.n / 2u;
    let lane = subgroupExclusiveAdd(1u);
    let r_lo = min(row0 + min(lane, 7u), params.m - 1u) * k4;
    let r_hi = min(row0 + 8u + min(lane, 7u), params.m - 1u) * k4;
    var acc: array<vec2<f32>, 16>;
    for (var kq = 0u; kq < k4; kq++) {
        let base = kq * 4u * n2 + c2;
        let b0 = b[base];
        let b1 = b[base + n2];
        let b2 = b[base + 2u * n2];
        let b3 = b[base + 3u * n2];
        let lo = a[r_lo + kq];
        let hi = a[r_hi + kq];
        for (var r = 0u; r < 8u; r++) {
            let av = subgroupShuffle(lo, r);
            acc[r] = fma(vec2(av.x), b0, fma(vec2(av.y), b1, fma(vec2(av.z), b2, fma(vec2(av.w), b3, acc[r]))));
        }
        for (var r = 0u; r < 8u; r++) {
            let av = subgroupShuffle(hi, r);
            acc[8u + r] = fma(vec2(av.x), b0, fma(vec2(av.y), b1, fma(vec2(av.z), b2, fma(vec2(av.w), b3, acc[8u + r]))));
        }
    }
    for (var r = 0u; r < 16u; r++) {
        let row = row0 + r;
        if row < params.m { out[row * n2 + c2] = acc[r]; }
    }
}
