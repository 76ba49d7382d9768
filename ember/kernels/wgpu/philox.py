"""Philox4x64-10 in WGSL, bit for bit the generator NumPy's ``np.random.Philox`` runs.

The CPU backend draws from ``Generator(Philox(key=seed, counter=stream << 64))``:
block ``b`` of that stream (four u64 words) is Philox of the 256-bit counter
``(b + 1, stream, 0, 0)`` under the key ``(seed, 0)``, and its 32-bit draws take
each word's low half, then its high half. ``philox_block(b, ...)`` computes that
block on the device, so ``rand`` (float32, float16) is the CPU's exactly.

WGSL has no 64-bit integers: a u64 is ``vec2<u32>(low, high)`` and the 64x64→128
bit products of the rounds are built from 16-bit halves.
"""

from __future__ import annotations

# Functions only; a kernel source that includes it calls philox_block.
PHILOX = """
// The 64-bit product of two u32 as (low, high).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xFFFFu;
    let a1 = a >> 16u;
    let b0 = b & 0xFFFFu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xFFFFu) + (p10 & 0xFFFFu);
    return vec2<u32>(a * b, a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let low = a.x + b.x;
    return vec2<u32>(low, a.y + b.y + select(0u, 1u, low < a.x));
}

// The 128-bit product of two u64 as four u32 limbs, lowest first.
fn mul_128(a: vec2<u32>, b: vec2<u32>) -> vec4<u32> {
    let t00 = mul_wide(a.x, b.x);
    let t01 = mul_wide(a.x, b.y);
    let t10 = mul_wide(a.y, b.x);
    let t11 = mul_wide(a.y, b.y);
    // Limb 1 sums three u32 terms; limb 2 three more plus limb 1's carry.
    let limb1 = add64(add64(vec2<u32>(t00.y, 0u), vec2<u32>(t01.x, 0u)), vec2<u32>(t10.x, 0u));
    let limb2 = add64(add64(add64(vec2<u32>(t01.y, 0u), vec2<u32>(t10.y, 0u)),
                            vec2<u32>(t11.x, 0u)), vec2<u32>(limb1.y, 0u));
    return vec4<u32>(t00.x, limb1.x, limb2.x, t11.y + limb2.y);
}

// Block `block` (counter word 0 is block + 1, with carry) of the stream with counter word 1
// `stream`, word 2 `lane` (0 for NumPy's stream), under key (seed, 0).
fn philox_block(block: u32, stream: vec2<u32>, lane: u32, seed: vec2<u32>) -> array<vec2<u32>, 4> {
    let first = block + 1u;
    var c = array<vec2<u32>, 4>(vec2<u32>(first, 0u), stream, vec2<u32>(lane, 0u),
                                vec2<u32>(0u, 0u));
    if (first == 0u) { c[0] = vec2<u32>(0u, 1u); }
    var k = array<vec2<u32>, 2>(seed, vec2<u32>(0u, 0u));
    for (var round = 0; round < 10; round++) {
        if (round > 0) {
            k[0] = add64(k[0], vec2<u32>(0x7F4A7C15u, 0x9E3779B9u));
            k[1] = add64(k[1], vec2<u32>(0x84CAA73Bu, 0xBB67AE85u));
        }
        let p0 = mul_128(vec2<u32>(0xE14C6C93u, 0xD2E7470Eu), c[0]);
        let p1 = mul_128(vec2<u32>(0x95121157u, 0xCA5A8263u), c[2]);
        c = array<vec2<u32>, 4>(p1.zw ^ c[1] ^ k[0], p1.xy, p0.zw ^ c[3] ^ k[1], p0.xy);
    }
    return c;
}

// 32-bit draw `j` (0..7) of a block: word j / 2, low half first.
fn draw(block: array<vec2<u32>, 4>, j: u32) -> u32 {
    let word = block[j / 2u];
    return select(word.x, word.y, (j & 1u) == 1u);
}
"""
