// Lab (examples/kernel_lab.rs): the rows8sg product with B read from an rgba32float texture (LAB_B=texture, entry from_texture) (one texel = 4 columns of a row of B).
struct Params { m: u32, k: u32, n: u32, e: u32, u1: f32, u2: f32, u3: f32, u4: f32 }
@group(0) @binding(1) var<storage, read_write> a: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(2) var bt: texture_2d<f32>;

fn store(row0: u32, c4: u32, acc: array<vec4<f32>, 8>) {
    let n4 = params.n / 4u;
    for (var r = 0u; r < 8u; r++) {
        let row = row0 + r;
        if row < params.m { out[row * n4 + c4] = acc[r]; }
    }
}

@compute @workgroup_size(16)
fn from_texture(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let row0 = wid.y * 8u;
    let c4 = wid.x * 16u + lid.x;
    let k4 = params.k / 4u;
    let lane = subgroupExclusiveAdd(1u);
    let my_row = min(row0 + min(lane, 7u), params.m - 1u) * k4;
    var acc: array<vec4<f32>, 8>;
    let x = i32(c4);
    for (var kq = 0u; kq < k4; kq++) {
        let y = i32(kq * 4u);
        let b0 = textureLoad(bt, vec2<i32>(x, y), 0);
        let b1 = textureLoad(bt, vec2<i32>(x, y + 1), 0);
        let b2 = textureLoad(bt, vec2<i32>(x, y + 2), 0);
        let b3 = textureLoad(bt, vec2<i32>(x, y + 3), 0);
        let read = a[my_row + kq];
        for (var r = 0u; r < 8u; r++) {
            let av = subgroupShuffle(read, r);
            acc[r] = fma(vec4(av.x), b0, fma(vec4(av.y), b1, fma(vec4(av.z), b2, fma(vec4(av.w), b3, acc[r]))));
        }
    }
    store(row0, c4, acc);
}
