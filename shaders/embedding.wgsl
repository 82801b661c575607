// Embedding lookup: out[r, c] = table[ids[r], c] for u32 token ids and a [vocab, dim]
// f32 table. An id >= vocab yields a zero row (the CPU reference does the same).

struct Params {
    len: u32,   // rows * dim
    dim: u32,
    vocab: u32,
    unused0: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> ids: array<u32>;
@group(0) @binding(2) var<storage, read_write> table: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;

@compute @workgroup_size(256)
fn embedding(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = grid_element(wid, groups, lid);
    if i < params.len {
        let row = i / params.dim;
        let c = i % params.dim;
        let id = ids[row];
        var v = 0.0;
        if id < params.vocab {
            v = f32(table[id * params.dim + c]);
        }
        out[i] = T(v);
    }
}
