// The checksum run: the GPU half of wgalloc's alias proof.
//
// `reduce` sums the checksum of each read tensor from memory as it is now;
// `write` compares a node's sums with the CPU's prediction (mismatches go to the
// state buffer's records), folds them into the node's key and writes its output
// words. The hash is the same u32 wrapping arithmetic as src/exec/checksum/hash.rs.
//
// Chunk buffers are bound whole in slots 0..5; tensors are (slot, word offset, words).
// Table: read records of READ_STRIDE u32s (slot, offset, len, expected, tensor,
// node, -, -), then node input lists of (kind, value) pairs: kind 0 = constant
// checksum, kind 1 = index of a read.
// State: [0] mismatch count, [1 + 4k ..] records (node, tensor, expected, got),
// [SUMS_BASE + r] the summed checksum of read r.

struct Params {
    // reduce: (-, first read, -, -)     write: (seed, input list start, inputs, -)
    a: vec4<u32>,
    // write: (out slot (always 0), out word offset, out words, -)
    b: vec4<u32>,
    // write: (first-input slot, its word offset, its words, 1 if elementwise)
    c: vec4<u32>,
    // write: (first read to check, reads to check, -, -)
    d: vec4<u32>,
}

const WORKGROUP: u32 = 256u;
const READ_STRIDE: u32 = 8u;
const MAX_RECORDS: u32 = 16u;
const SUMS_BASE: u32 = 65u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read_write> state: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> slot0: array<u32>;
@group(0) @binding(4) var<storage, read_write> slot1: array<u32>;
@group(0) @binding(5) var<storage, read_write> slot2: array<u32>;
@group(0) @binding(6) var<storage, read_write> slot3: array<u32>;
@group(0) @binding(7) var<storage, read_write> slot4: array<u32>;
@group(0) @binding(8) var<storage, read_write> slot5: array<u32>;

var<workgroup> partial: atomic<u32>;

fn mix32(value: u32) -> u32 {
    var x = value;
    x ^= x >> 16u;
    x *= 0x85ebca6bu;
    x ^= x >> 13u;
    x *= 0xc2b2ae35u;
    x ^= x >> 16u;
    return x;
}

fn term(index: u32, word: u32) -> u32 {
    return mix32(word ^ mix32(index + 0x632be5abu));
}

fn combine(key: u32, position: u32, sum: u32) -> u32 {
    return mix32(key ^ (sum + mix32(position + 0x165667b1u)));
}

fn fresh_word(key: u32, index: u32) -> u32 {
    return mix32(key ^ mix32(index * 0x9e3779b9u + 1u));
}

// One workgroup row (y) per read of the group; workgroups along x split its words.
@compute @workgroup_size(256)
fn reduce(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let r = params.a.y + wid.y;
    let base = r * READ_STRIDE;
    let slot = table[base];
    let offset = table[base + 1u];
    let len = table[base + 2u];
    let stride = groups.x * WORKGROUP;
    var acc = 0u;
    let first = wid.x * WORKGROUP + lid;
    // One loop per slot, so that the loads in the loop do not branch on the slot.
    switch slot {
        case 0u: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot0[offset + i]); }
        }
        case 1u: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot1[offset + i]); }
        }
        case 2u: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot2[offset + i]); }
        }
        case 3u: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot3[offset + i]); }
        }
        case 4u: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot4[offset + i]); }
        }
        default: {
            for (var i = first; i < len; i += stride) { acc += term(i, slot5[offset + i]); }
        }
    }
    atomicAdd(&partial, acc);
    workgroupBarrier();
    if lid == 0u {
        atomicAdd(&state[SUMS_BASE + r], atomicLoad(&partial));
    }
}

@compute @workgroup_size(256)
fn write(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    if gid.x == 0u {
        for (var k = 0u; k < params.d.y; k++) {
            let r = params.d.x + k;
            let got = atomicLoad(&state[SUMS_BASE + r]);
            let expected = table[r * READ_STRIDE + 3u];
            if got != expected {
                let n = atomicAdd(&state[0], 1u);
                if n < MAX_RECORDS {
                    let at = 1u + 4u * n;
                    atomicStore(&state[at], table[r * READ_STRIDE + 5u]);
                    atomicStore(&state[at + 1u], table[r * READ_STRIDE + 4u]);
                    atomicStore(&state[at + 2u], expected);
                    atomicStore(&state[at + 3u], got);
                }
            }
        }
    }
    var key = params.a.x;
    for (var k = 0u; k < params.a.z; k++) {
        let at = params.a.y + 2u * k;
        var sum = table[at + 1u];
        if table[at] == 1u {
            sum = atomicLoad(&state[SUMS_BASE + sum]);
        }
        key = combine(key, k, sum);
    }
    // The output is always in slot 0; an elementwise node's first input in slot 0
    // (in place) or slot 1.
    let stride = groups.x * WORKGROUP;
    let out_offset = params.b.y;
    let in0_offset = params.c.y;
    let in0_len = params.c.z;
    if params.c.w == 0u {
        for (var i = gid.x; i < params.b.z; i += stride) {
            slot0[out_offset + i] = fresh_word(key, i);
        }
    } else if params.c.x == 0u {
        for (var i = gid.x; i < params.b.z; i += stride) {
            var x = 0u;
            if i < in0_len {
                x = slot0[in0_offset + i];
            }
            slot0[out_offset + i] = mix32(x + fresh_word(key, i));
        }
    } else {
        for (var i = gid.x; i < params.b.z; i += stride) {
            var x = 0u;
            if i < in0_len {
                x = slot1[in0_offset + i];
            }
            slot0[out_offset + i] = mix32(x + fresh_word(key, i));
        }
    }
}
