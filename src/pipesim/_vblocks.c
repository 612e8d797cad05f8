/* The schedule builders' loops in C, compiled with _engine.c into one library
 * (pipesim/kernel.py; without a compiler the same loops run in Python): the repeated
 * V blocks of autoschedule/blocks.py and the as-soon-as-possible timing of
 * autoschedule/evaluate.py. */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The repeated V blocks of pipesim/autoschedule/blocks.py (``block_variants``), slot for
 * slot: the same passes over the same slots in the same order, so the same orders. Rank
 * r's slots are occ[r * H .. r * H + H), each an op's code (kind * S + stage) * M + mb (the
 * index the Python's ``end`` table reads) or -1. See blocks.py for what each step means. */
typedef struct {
    int64_t pp, M, S, H, hz; /* hz: the current pass's horizon */
    int64_t *prof, *pend, *tail, *tpend, *end, *last_w;
    int32_t *ops; /* (slot, rank, code) triples in slot order */
    uint8_t *within;
} bv_ctx;

static int64_t bv_input_end(const int64_t *end, int64_t S, int64_t M, int64_t kind, int64_t s, int64_t i) {
    if (kind == 0) return s == 0 ? 0 : end[(s - 1) * M + i];
    if (kind == 1) return s == S - 1 ? end[s * M + i] : end[(S + s + 1) * M + i];
    return end[(S + s) * M + i];
}

static int bv_place_ws(const bv_ctx *c, int32_t *o) {
    int64_t last = -1, SM = c->S * c->M;
    for (int64_t t = 0; t < c->H; t++) {
        if (o[t] < 0 || o[t] / SM != 1) continue;
        int64_t u = t + 1 > last + 1 ? t + 1 : last + 1;
        while (u < c->H && o[u] >= 0) u++;
        if (u >= c->H) return 0;
        o[u] = (int32_t)(o[t] + SM);
        last = u;
    }
    return 1;
}

static int bv_place_ws_by_chunk(const bv_ctx *c, int32_t *o, int32_t *q) {
    int64_t SM = c->S * c->M, M = c->M, last = -1, h[2] = {0, 0}, n[2] = {0, 0};
    for (int64_t t = 0; t < c->H; t++)
        if (o[t] >= 0) last = t;
    for (int64_t t = 0; t <= last || n[0] > h[0] || n[1] > h[1]; t++) {
        if (t >= c->H) return 0;
        int32_t op = o[t];
        if (op < 0) {
            int k = n[0] > h[0] ? 0 : n[1] > h[1] ? 1 : -1;
            if (k >= 0) o[t] = (int32_t)(q[k * 2 * M + h[k]++] + SM);
        } else if (op / SM == 1) {
            int k = (op / M) % c->S >= c->pp ? 0 : 1;
            q[k * 2 * M + n[k]++] = op;
        }
    }
    return 1;
}

/* ``_profile`` from slot ``start`` with the state before it; writes c->tail / c->tpend and
 * returns how many slots, or -1 for None. ``old`` NULL: no settling. */
static int64_t bv_profile(bv_ctx *c, const int32_t *o, int64_t start, int64_t live, int64_t pending, const int64_t *old,
                          const int64_t *old_pend, int64_t check, int64_t bound) {
    int64_t SM = c->S * c->M, k = 0;
    if (live > bound) return -1;
    for (int64_t t = start; t < c->hz; t++) {
        int32_t op = o[t];
        if (op < 0) {
            if (pending) {
                live--;
                pending--;
            }
        } else if (op / SM == 0) {
            if (++live > bound) return -1;
        } else if (op / SM == 1) {
            pending++;
        } else {
            live--;
        }
        c->tail[k] = live;
        c->tpend[k++] = pending;
        if (old && t >= check && live == old[t] && pending == old_pend[t]) break;
    }
    return k;
}

static void bv_moves(bv_ctx *c, int32_t *occ, const int32_t *ops, int64_t n_ops, int64_t bound, int with_ws, int paired) {
    int64_t pp = c->pp, M = c->M, S = c->S, SM = S * M, H = c->H, hz = c->hz;
    for (int64_t k = 0; k < n_ops; k++) {
        int64_t t0 = ops[3 * k], r = ops[3 * k + 1];
        int32_t code = ops[3 * k + 2];
        int64_t kind = code / SM, s = (code / M) % S, i = code % M, at = t0;
        int32_t *o = occ + r * H;
        int64_t *pr = c->prof + r * hz, *pe = c->pend + r * hz;
        int64_t ready = bv_input_end(c->end, S, M, kind, s, i), x;
        if (paired && kind == 2) {
            if (c->last_w[r] > ready) ready = c->last_w[r];
        } else if (i > 0 && c->end[code - 1] > ready) {
            ready = c->end[code - 1];
        }
        if (paired && ((kind == 0 && s >= pp) || (kind == 1 && s < pp))) {
            x = c->end[(kind * S + S - 1 - s) * M + i];
            if (x > ready) ready = x;
        }
        if (with_ws && kind == 0 && ready < t0) {
            for (int64_t j = t0 - 1; j >= ready; j--) {
                if (pr[j] == bound) {
                    ready = j + 1;
                    break;
                }
            }
        }
        for (int64_t t = ready; t < t0; t++) {
            if (o[t] >= 0) continue;
            if (with_ws) {
                int64_t step = kind == 0 ? 1 : kind == 2 ? -1 : 0;
                for (int64_t u = t; u < t0 && step; u++) pr[u] += step;
                o[t0] = -1;
                o[t] = code;
                at = t;
                break;
            }
            o[t0] = -1;
            o[t] = code;
            int64_t got = bv_profile(c, o, t, t ? pr[t - 1] : 0, t ? pe[t - 1] : 0, pr, pe, t0, bound);
            int ok = got >= 0 && c->within[r];
            if (got >= 0 && !ok) {
                /* the slots either side as they were, each side's most (0 for none) within the bound */
                int64_t most = 0, n = t + got;
                for (int64_t u = 0; u < t; u++)
                    if (u == 0 || pr[u] > most) most = pr[u];
                ok = most <= bound;
                most = 0;
                for (int64_t u = n; u < hz; u++)
                    if (u == n || pr[u] > most) most = pr[u];
                ok = ok && most <= bound;
            }
            if (ok) {
                memcpy(pr + t, c->tail, got * sizeof(int64_t));
                memcpy(pe + t, c->tpend, got * sizeof(int64_t));
                c->within[r] = 1;
                at = t;
                break;
            }
            o[t] = -1;
            o[t0] = code;
        }
        c->end[code] = at + 1;
        if (kind == 2) c->last_w[r] = at + 1;
    }
}

/* ``_reorder``: 0 when a slot would fall outside the ranks' room. */
static int bv_reorder(bv_ctx *c, int32_t *occ, int64_t bound, int with_ws, int paired) {
    int64_t pp = c->pp, M = c->M, S = c->S, SM = S * M, H = c->H, hz = 0, n_ops = 0;
    for (int64_t r = 0; r < pp; r++)
        for (int64_t t = 0; t < H; t++)
            if (occ[r * H + t] >= 0 && t + 2 > hz) hz = t + 2;
    if (hz > H) return 0;
    c->hz = hz;
    for (int64_t r = 0; r < pp; r++) {
        int32_t *o = occ + r * H;
        int64_t *pr = c->prof + r * hz, *pe = c->pend + r * hz, most = 0;
        if (with_ws) {
            int64_t live = 0;
            for (int64_t t = 0; t < hz; t++) {
                if (o[t] >= 0 && o[t] / SM != 1) live += o[t] / SM == 0 ? 1 : -1;
                pr[t] = live;
                pe[t] = 0;
            }
        } else {
            bv_profile(c, o, 0, 0, 0, NULL, NULL, hz, INT64_MAX);
            memcpy(pr, c->tail, hz * sizeof(int64_t));
            memcpy(pe, c->tpend, hz * sizeof(int64_t));
        }
        for (int64_t t = 0; t < hz; t++)
            if (t == 0 || pr[t] > most) most = pr[t];
        c->within[r] = most <= bound;
        c->last_w[r] = 0;
    }
    for (int64_t t = 0; t < hz; t++)
        for (int64_t r = 0; r < pp; r++)
            if (occ[r * H + t] >= 0) {
                c->ops[3 * n_ops] = (int32_t)t;
                c->ops[3 * n_ops + 1] = (int32_t)r;
                c->ops[3 * n_ops++ + 2] = occ[r * H + t];
            }
    memset(c->end, 0, 3 * SM * sizeof(int64_t));
    for (int64_t k = 0; k < n_ops; k++) c->end[c->ops[3 * k + 2]] = c->ops[3 * k] + 1;
    /* the ops before a slot (and rank): bisect_left of (slot, rank) in slot order */
    int64_t steady = n_ops, cool = n_ops;
    for (int64_t i = 0; i < M; i++) {
        int64_t slot = c->end[SM + i] - 1, n = 0;
        while (n < n_ops && c->ops[3 * n] < slot) n++;
        if (n < steady) steady = n;
    }
    for (int64_t s = 0; s < pp; s++) {
        int64_t slot = c->end[s * M + M - 1] - 1, n = 0;
        while (n < n_ops && (c->ops[3 * n] < slot || (c->ops[3 * n] == slot && c->ops[3 * n + 1] < s))) n++;
        if (n >= steady && n < cool) cool = n;
    }
    if (with_ws) {
        bv_moves(c, occ, c->ops, steady, bound, 1, paired);
        int64_t *seen = c->tail; /* scratch: each rank's last W of the steady state, 0 for none yet */
        int64_t found = 0;
        memset(seen, 0, pp * sizeof(int64_t));
        for (int64_t n = cool - 1; n >= steady && found < pp; n--) {
            int64_t r = c->ops[3 * n + 1];
            if (c->ops[3 * n + 2] / SM == 2 && !seen[r]) {
                seen[r] = c->ops[3 * n] + 1;
                found++;
            }
        }
        for (int64_t r = 0; r < pp; r++)
            if (seen[r]) c->last_w[r] = seen[r];
    }
    bv_moves(c, occ, c->ops + 3 * cool, n_ops - cool, bound, with_ws, paired);
    return 1;
}

static int bv_squeeze(const bv_ctx *c, const int32_t *in, int32_t *out) {
    int64_t pp = c->pp, M = c->M, S = c->S, H = c->H;
    int64_t *end = c->end, *free_at = c->tpend;
    memset(end, 0, 3 * S * M * sizeof(int64_t));
    memset(free_at, 0, pp * sizeof(int64_t));
    for (int64_t k = 0; k < pp * H; k++) out[k] = -1;
    for (int64_t t = 0; t < H; t++)
        for (int64_t r = 0; r < pp; r++) {
            int32_t op = in[r * H + t];
            if (op < 0) continue;
            int64_t ready = bv_input_end(end, S, M, op / (S * M), (op / M) % S, op % M);
            int64_t u = ready > free_at[r] ? ready : free_at[r];
            if (u >= H) return 0;
            out[r * H + u] = op;
            end[op] = free_at[r] = u + 1;
        }
    return 1;
}

static void bv_without_ws(const bv_ctx *c, int32_t *occ) {
    for (int64_t k = 0; k < c->pp * c->H; k++)
        if (occ[k] >= 0 && occ[k] / (c->S * c->M) == 2) occ[k] = -1;
}

/* Each variant's per-rank order, rank r's 6M op codes at out[(n * pp + r) * 6M ..], from
 * the block's forward and backward slots of micro-batch 0 (tf, tb per stage, collision
 * free: Block.times). H: slots a rank may use. Returns 1, or 0 when some slot fell
 * outside H (the caller then runs the Python). */
int64_t pipesim_block_variants(int64_t pp, int64_t M, int64_t H, const int64_t *tf, const int64_t *tb, int64_t paired,
                               int64_t n_variants, const uint8_t *squeezes, int32_t *out) {
    int64_t S = 2 * pp, SM = S * M, ok = 1;
    bv_ctx c = {pp, M, S, H, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t *big = malloc((4 * pp * H + 2 * H + 3 * SM + pp + 2) * sizeof(int64_t));
    int32_t *first = malloc((3 * pp * H + 3 * 3 * SM + 4 * M + 3) * sizeof(int32_t));
    c.within = malloc(pp + 1);
    if (!big || !first || !c.within) {
        free(big);
        free(first);
        free(c.within);
        return 0;
    }
    c.prof = big;
    c.pend = big + pp * H;
    c.tail = big + 2 * pp * H;
    c.tpend = c.tail + H + pp;
    c.end = c.tpend + H + pp;
    c.last_w = c.end + 3 * SM;
    int32_t *work = first + pp * H, *spare = work + pp * H;
    c.ops = spare + pp * H;
    int32_t *queue = c.ops + 3 * 3 * SM;
    for (int64_t k = 0; k < pp * H; k++) first[k] = -1;
    for (int64_t r = 0; r < pp && ok; r++) {
        int64_t mine[2] = {r, S - 1 - r};
        for (int j = 0; j < 2; j++)
            for (int64_t i = 0; i < M; i++) {
                int64_t a = tf[mine[j]] + 6 * i, b = tb[mine[j]] + 6 * i;
                if (a >= H || b >= H) ok = 0;
                if (!ok) break;
                first[r * H + a] = (int32_t)(mine[j] * M + i);
                first[r * H + b] = (int32_t)(SM + mine[j] * M + i);
            }
        ok = ok && bv_place_ws(&c, first + r * H);
    }
    int64_t bound = 0;
    for (int64_t r = 0; r < pp && ok; r++) {
        int64_t live = 0;
        for (int64_t t = 0; t < H; t++) {
            int32_t op = first[r * H + t];
            if (op >= 0 && op / SM != 1) live += op / SM == 0 ? 1 : -1;
            if (live > bound) bound = live;
        }
    }
    ok = ok && bv_reorder(&c, first, bound, 1, (int)paired);
    for (int64_t v = 0; v < n_variants && ok; v++) {
        if (squeezes[v])
            ok = bv_squeeze(&c, first, work);
        else
            memcpy(work, first, pp * H * sizeof(int32_t));
        bv_without_ws(&c, work);
        ok = ok && bv_reorder(&c, work, bound, 0, (int)paired);
        if (ok && squeezes[v]) {
            for (int64_t r = 0; r < pp && ok; r++) ok = bv_place_ws(&c, work + r * H);
            ok = ok && bv_squeeze(&c, work, spare);
            if (ok) {
                bv_without_ws(&c, spare);
                memcpy(work, spare, pp * H * sizeof(int32_t));
            }
        }
        for (int64_t r = 0; r < pp && ok; r++) {
            int32_t *o = work + r * H, *dst = out + (v * pp + r) * 6 * M;
            ok = paired ? bv_place_ws_by_chunk(&c, o, queue) : bv_place_ws(&c, o);
            int64_t n = 0;
            for (int64_t t = 0; t < H && ok; t++)
                if (o[t] >= 0) {
                    if (n >= 6 * M) ok = 0;
                    else dst[n++] = o[t];
                }
            ok = ok && n == 6 * M;
        }
    }
    free(big);
    free(first);
    free(c.within);
    return ok;
}

/* The as-soon-as-possible timing of pipesim/autoschedule/evaluate.py (``timed`` without a
 * base or a cap): rank r's ops are kind/stage/mb[offsets[r] .. offsets[r+1]); an F starts
 * when the rank is free and the F of the stage before (plus f_lat) has ended, a B when
 * the B of the stage after (the last stage's F) has, a W when its own B has. A rank
 * whose next input is not there parks on it until it ends. Writes each op's start and
 * end, and the end of every F (s * M + mb) and B (S * M + s * M + mb) to ``done`` (-1
 * where it never ran; given as -1). Returns 1, or 0 when the orders deadlock. Scratch:
 * ptr, free_at (n), park_head, park_tail (2SM, -1), next_parked, queue (n). */
int64_t pipesim_asap(int64_t n, int64_t S, int64_t M, const int64_t *offsets, const int32_t *kind, const int32_t *stage,
                     const int32_t *mb, const double *f, const double *b, const double *w, const double *f_lat,
                     const double *b_lat, double *start, double *end, double *done, int64_t *ptr, double *free_at,
                     int32_t *park_head, int32_t *park_tail, int32_t *next_parked, int32_t *queue) {
    int64_t SM = S * M, q_head = 0, q_len = n;
    for (int64_t r = 0; r < n; r++) {
        ptr[r] = offsets[r];
        free_at[r] = 0.0;
        queue[r] = (int32_t)r;
    }
    while (q_len > 0) {
        int64_t r = queue[q_head];
        q_head = (q_head + 1) % n;
        q_len--;
        int64_t p = ptr[r], stop = offsets[r + 1];
        double t_free = free_at[r];
        while (p < stop) {
            int64_t k = kind[p], s = stage[p], own = s * M + mb[p], need = -1;
            double t = t_free, e;
            if (k == 0 && s > 0)
                need = own - M;
            else if (k == 1)
                need = s == S - 1 ? own : SM + own + M;
            else if (k == 2)
                need = SM + own;
            if (need >= 0) {
                e = done[need];
                if (e < 0) {
                    next_parked[r] = -1;
                    if (park_tail[need] >= 0)
                        next_parked[park_tail[need]] = (int32_t)r;
                    else
                        park_head[need] = (int32_t)r;
                    park_tail[need] = (int32_t)r;
                    break;
                }
                if (k != 2) {
                    e += k == 0 ? f_lat[own] : b_lat[own];
                    t = e > t_free ? e : t_free;
                }
            }
            double en = t + (k == 0 ? f[s] : k == 1 ? b[s] : w[s]);
            start[p] = t;
            end[p] = en;
            t_free = en;
            p++;
            if (k != 2) {
                int64_t key = k == 1 ? SM + own : own;
                done[key] = en;
                for (int32_t x = park_head[key]; x >= 0; x = next_parked[x]) {
                    queue[(q_head + q_len) % n] = x;
                    q_len++;
                }
                park_head[key] = park_tail[key] = -1;
            }
        }
        ptr[r] = p;
        free_at[r] = t_free;
    }
    for (int64_t r = 0; r < n; r++)
        if (ptr[r] < offsets[r + 1]) return 0;
    return 1;
}
