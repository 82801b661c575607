// Lab (examples/kernel_lab.rs, LAB_B=strips, entry from_buffer): the rows8sg product with B packed in strips of 64 columns, each strip's rows contiguous.
struct Params { m: u32, k: u32, n: u32, e: u32, u1: f32, u2: f32, u3: f32, u4: f32 }
@group(0) @binding(1) var<storage, read_write> a: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> b: array<vec4<f32>>;

fn store(row0: u32, c4: u32, acc: array<vec4<f32>, 8>) {
    let n4 = params.n / 4u;
    for (var r = 0u; r < 8u; r++) {
        let row = row0 + r;
        if row < params.m { out[row * n4 + c4] = acc[r]; }
    }
}

@compute @workgroup_size(16)
fn from_buffer(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row0 = wid.y * 8u;
    let c4 = wid.x * 16u + lid.x;
    let k4 = params.k / 4u;
    let n4 = params.n / 4u;
    let lane = subgroupExclusiveAdd(1u);
    let my_row = min(row0 + min(lane, 7u), params.m - 1u) * k4;
    var acc: array<vec4<f32>, 8>;
    for (var kq = 0u; kq < k4; kq++) {
        let base = ((c4 / 16u) * params.k + kq * 4u) * 16u + c4 % 16u;
        let b0 = b[base];
        let b1 = b[base + 16u];
        let b2 = b[base + 32u];
        let b3 = b[base + 48u];
        let read = a[my_row + kq];
        for (var r = 0u; r < 8u; r++) {
            let av = subgroupShuffle(read, r);
            acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
        }
    }
    store(row0, c4, acc);
}
