#!/usr/bin/env python3
"""Host emulation of kernels/cuda/moe_decode_quant_mma.cu's index logic (no GPU was lent to qdec22).

Follows the kernels lane by lane: the block -> (source, tile) mapping of gate_up, the warps' k
ranges, each lane's chunk (c = 4 s + lane % 4) of rows g and g + 8, the word pairing (fp8: inputs
2j, 2j + 1; NVFP4: decode_bf16_nvfp4_paired's 8h + i, 8h + i + 4, x paired alike by pair_x_nvfp4),
the registers of mma_rows::mma_slab placed as PTX lays out m16n8k16's A/B/C fragments, the warp
combine and act's addresses; down's (source, split) items, the part[] addresses and the per-token
combine; moe_rows::group_kernel's token lists for the grouped form. Weights are random floats (the
decode itself, exact, is checked by gpu_check), so the emulated act and out must equal a direct
float64 product up to summation order: it prints the largest relative difference of each case and
exits 1 above 1e-9. Usage: emulate_mma.py (pure Python; a few minutes).
"""
import math
import random
import sys

TILE, GATE_WARPS, DOWN_WARPS, SPLITS = 16, 4, 8, 4


def pairing(fmt):
    """Word j of a 16-input chunk: the two inputs it holds (low, high half)."""
    if fmt == "fp8":
        return [(2 * j, 2 * j + 1) for j in range(8)]
    return [(8 * h + i, 8 * h + i + 4) for h in range(2) for i in range(4)]


def zeros(*shape):
    return [0.0] * shape[0] if len(shape) == 1 else [zeros(*shape[1:]) for _ in range(shape[0])]


def dot(a, b):
    return math.fsum(u * v for u, v in zip(a, b))


def matvec(W, v):
    return [dot(row, v) for row in W]


def mma(c, regs):
    """c[lane] (4 floats) += A B with A, B from the 32 lanes' (a0..a3, b0, b1), each a pair."""
    A, B = zeros(16, 16), zeros(16, 8)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        a, b = regs[lane]
        for e in range(2):
            A[g][2 * t + e], A[g + 8][2 * t + e] = a[0][e], a[1][e]
            A[g][2 * t + 8 + e], A[g + 8][2 * t + 8 + e] = a[2][e], a[3][e]
            B[2 * t + e][g], B[2 * t + 8 + e][g] = b[0][e], b[1][e]
    D = [[sum(A[m][k] * B[k][n] for k in range(16)) for n in range(8)] for m in range(16)]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for i, v in enumerate((D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1])):
            c[lane][i] += v


def mma_chunk(c, w0, w1, xw):
    """mma_chunk: per lane w0/w1 = 8 words (pairs) of rows g, g + 8; xw = 8 words of its column."""
    for half in range(2):
        regs = []
        for lane in range(32):
            r0, r1, x = w0[lane][4 * half:4 * half + 4], w1[lane][4 * half:4 * half + 4], xw[lane][4 * half:4 * half + 4]
            regs.append(((r0[0], r1[0], r0[1], r1[1]), (x[0], x[1])))
        mma(c, regs)
        regs = []
        for lane in range(32):
            r0, r1, x = w0[lane][4 * half:4 * half + 4], w1[lane][4 * half:4 * half + 4], xw[lane][4 * half:4 * half + 4]
            regs.append(((r0[2], r1[2], r0[3], r1[3]), (x[2], x[3])))
        mma(c, regs)


def words(vec16, pairs):
    return [(vec16[p], vec16[q]) for p, q in pairs]


def groups_of(expert, T, K, E):
    count = [0] * E
    lists = [[] for _ in range(E)]
    for p in range(T * K):
        e = expert[p]
        count[e] += 1
        lists[e].append(p)
    used = [e for e in range(E) if count[e]]
    return used, count, lists


def sources(expert, T, K, E, grouped):
    """Routed sources in launch order: (expert, [pairs])."""
    if grouped:
        used, count, lists = groups_of(expert, T, K, E)
        return [(e, lists[e]) for e in used]
    return [(expert[p], [p]) for p in range(T * K)]


def k_product(W, Xcols, rows, o0, chunks, s0, s1, fmt, ng):
    """One warp's acc[cg][lane][4] over steps s0..s1 of rows o0.. (W[row] vectors, Xcols[col] vectors)."""
    pairs = pairing(fmt)
    acc = [[[0.0] * 4 for _ in range(32)] for _ in range(ng)]
    for s in range(s0, s1):
        w0, w1, xs = [], [], [[] for _ in range(ng)]
        for lane in range(32):
            g, t4 = lane // 4, lane % 4
            c = 4 * s + t4
            inside = c < chunks
            z = [(0.0, 0.0)] * 8
            w0.append(words(W[o0 + g][16 * c:16 * c + 16], pairs) if inside else z)
            w1.append(words(W[o0 + g + 8][16 * c:16 * c + 16], pairs) if inside else z)
            for cg in range(ng):
                col = cg * 8 + g
                xs[cg].append(words(Xcols[col][16 * c:16 * c + 16], pairs) if inside and col < len(Xcols) else z)
        for cg in range(ng):
            if cg * 8 < len(Xcols):
                mma_chunk(acc[cg], w0, w1, xs[cg])
    return acc


def emulate(fmt, T, E, K, H, I, S, grouped, seed):
    r = random.Random(seed)
    mat = lambda n, m: [[r.gauss(0, 0.05) for _ in range(m)] for _ in range(n)]
    gate_up = [mat(I, H) for _ in range(2 * E)]
    down = [mat(H, I) for _ in range(E)]
    sgu = [mat(S, H) for _ in range(2)]
    sdn = mat(H, S)
    x = [[r.gauss(0, 1) for _ in range(H)] for _ in range(T)]
    expert = [e for _ in range(T) for e in r.sample(range(E), K)]
    weight = [r.uniform(0.1, 0.9) for _ in range(T * K)]
    aw = max(I, S)
    ng = 1 if T <= 8 else 2 if T <= 16 else 4
    act = [[[None] * aw for _ in range(K + 1)] for _ in range(T)]
    srcs = sources(expert, T, K, E, grouped)
    silu = lambda v: v / (1 + math.exp(-v))
    # gate_up: shared tiles, then each routed source's tiles (blocks past the sources in use exit).
    chunks = H // 16
    steps = (chunks + 3) // 4
    jobs = [(None, o0) for o0 in range(0, S, TILE)] + [(j, o0) for j in range(len(srcs)) for o0 in range(0, I, TILE)]
    for j, o0 in jobs:
        if j is None:
            Wg, Wu, cols = sgu[0], sgu[1], [(t, K) for t in range(T)]
        else:
            e, plist = srcs[j]
            Wg, Wu, cols = gate_up[2 * e], gate_up[2 * e + 1], [(p // K, p % K) for p in plist]
        X = [x[t] for t, _ in cols]
        red = []
        for w in range(GATE_WARPS):
            s0, s1 = w * steps // GATE_WARPS, (w + 1) * steps // GATE_WARPS
            red.append((k_product(Wg, X, None, o0, chunks, s0, s1, fmt, ng), k_product(Wu, X, None, o0, chunks, s0, s1, fmt, ng)))
        for i in range(TILE * len(cols)):
            row, col = i % TILE, i // TILE
            cg, n = col // 8, col % 8
            l, e_ = (row % 8) * 4 + n // 2, (row // 8) * 2 + n % 2
            gs = sum(red[v][0][cg][l][e_] for v in range(GATE_WARPS))
            us = sum(red[v][1][cg][l][e_] for v in range(GATE_WARPS))
            t, slot = cols[col]
            act[t][slot][o0 + row] = silu(gs) * us
    # down: a block per 16 rows; items (source, split); part[pair][split][row].
    out = zeros(T, H)
    routed = len(srcs)
    for o0 in range(0, H, TILE):
        part = [[[None] * TILE for _ in range(SPLITS)] for _ in range(T * (K + 1))]
        for item in range((routed + 1) * SPLITS):
            si, split = item // SPLITS, item % SPLITS
            if si == routed:
                W, plist, width = sdn, [T * K + t for t in range(T)], S
                X = [act[t][K] for t in range(T)]
            else:
                e, plist = srcs[si]
                W, width = down[e], I
                X = [act[p // K][p % K] for p in plist]
            ch = width // 16
            st = (ch + 3) // 4
            s0, s1 = split * st // SPLITS, (split + 1) * st // SPLITS
            acc = k_product(W, X, None, o0, ch, s0, s1, fmt, ng)
            for cg in range(ng):
                for lane in range(32):
                    g, t4 = lane // 4, lane % 4
                    for e_ in range(4):
                        col, row = cg * 8 + 2 * t4 + e_ % 2, g + 8 * (e_ // 2)
                        if col < len(plist):
                            part[plist[col]][split][row] = acc[cg][lane][e_]
        for t in range(T):
            for row in range(TILE):
                v = 0.0
                for j in range(K):
                    v += weight[t * K + j] * sum(part[t * K + j][s][row] for s in range(SPLITS))
                v += sum(part[T * K + t][s][row] for s in range(SPLITS))
                out[t][o0 + row] = v
    # The direct product.
    ref, ref_act = zeros(T, H), [[None] * (K + 1) for _ in range(T)]
    for t in range(T):
        for j in range(K):
            e = expert[t * K + j]
            a = [silu(g) * u for g, u in zip(matvec(gate_up[2 * e], x[t]), matvec(gate_up[2 * e + 1], x[t]))]
            ref_act[t][j] = a
            ref[t] = [v + weight[t * K + j] * d for v, d in zip(ref[t], matvec(down[e], a))]
        a = [silu(g) * u for g, u in zip(matvec(sgu[0], x[t]), matvec(sgu[1], x[t]))]
        ref_act[t][K] = a
        ref[t] = [v + d for v, d in zip(ref[t], matvec(sdn, a))]
    scale = max(abs(v) for row in ref for v in row)
    err_out = max(abs(o - v) for ro, rr in zip(out, ref) for o, v in zip(ro, rr)) / scale
    bad_act, err_act, amax = 0, 0.0, 0.0
    for t in range(T):
        for j in range(K + 1):
            for o, v in enumerate(ref_act[t][j]):
                got = act[t][j][o]
                amax = max(amax, abs(v))
                if got is None:
                    bad_act += 1
                else:
                    err_act = max(err_act, abs(got - v))
    return err_out, err_act / amax, bad_act


def main():
    worst = 0.0
    cases = [("fp8", 1, 8, 3, 528, 208, 144, False), ("nvfp4", 1, 8, 3, 528, 208, 144, False),
             ("fp8", 5, 8, 3, 256, 96, 160, True), ("nvfp4", 5, 8, 3, 256, 96, 160, True),
             ("nvfp4", 3, 8, 3, 144, 48, 80, False), ("fp8", 10, 16, 4, 128, 48, 32, True),
             ("nvfp4", 20, 16, 8, 64, 32, 48, True), ("fp8", 17, 16, 2, 64, 32, 16, False)]
    for fmt, T, E, K, H, I, S, grouped in cases:
        eo, ea, bad = emulate(fmt, T, E, K, H, I, S, grouped, 7 + T)
        worst = max(worst, eo, ea, 1.0 if bad else 0.0)
        print(f"{fmt:5} T {T:2} E {E} top {K} {H} -> {I} (+ shared {S}) {'grouped ' if grouped else 'per pair'}: "
              f"out rel.err {eo:.2e}, act rel.err {ea:.2e}, unwritten act {bad}")
    print("PASS" if worst <= 1e-9 else "FAIL")
    sys.exit(0 if worst <= 1e-9 else 1)


if __name__ == "__main__":
    main()
