/* The engine's two loops in C (pipesim/kernel.py compiles this at first use and falls
 * back to the same loops in Python without a compiler). Item i's predecessors are
 * dep[dep_ptr[i] .. dep_ptr[i+1]), and the item before it on its rank; items are stored
 * rank after rank, rank r's at offsets[r] .. offsets[r+1]. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The walk: each rank runs its items in order until its head waits for an item not yet
 * done; it then parks on that item and is woken when it is done. Writes the items in an
 * executable order to `order` and returns how many were placed (fewer than n: deadlock;
 * `head[r]` is then rank r's first item not placed). Scratch: `done` (n bytes, zeroed),
 * `parked` (n, -1), `next_parked` and `queue` (pp). */
int64_t pipesim_walk(int64_t pp, const int64_t *offsets, const int32_t *dep_ptr, const int32_t *dep,
                     int32_t *order, int64_t *head, uint8_t *done, int32_t *parked, int32_t *next_parked,
                     int32_t *queue) {
    int64_t placed = 0, q_head = 0, q_len = pp;
    for (int64_t r = 0; r < pp; r++) {
        head[r] = offsets[r];
        queue[r] = (int32_t)r;
    }
    while (q_len > 0) {
        int64_t r = queue[q_head];
        q_head = (q_head + 1) % pp;
        q_len--;
        int64_t i = head[r], stop = offsets[r + 1];
        while (i < stop) {
            int32_t missing = -1;
            for (int32_t e = dep_ptr[i]; e < dep_ptr[i + 1]; e++) {
                if (!done[dep[e]]) {
                    missing = dep[e];
                    break;
                }
            }
            if (missing >= 0) {
                next_parked[r] = parked[missing];
                parked[missing] = (int32_t)r;
                break;
            }
            order[placed++] = (int32_t)i;
            done[i] = 1;
            for (int32_t w = parked[i]; w >= 0; w = next_parked[w]) {
                queue[(q_head + q_len) % pp] = w;
                q_len++;
            }
            parked[i] = -1;
            i++;
        }
        head[r] = i;
    }
    return placed;
}

/* The timing pass: in `order`, an item starts when the item before it on its rank (i - 1,
 * unless `first[i]`) has ended and every predecessor's end plus its edge's latency has
 * passed. */
void pipesim_times(int64_t n, const int32_t *order, const uint8_t *first, const int32_t *dep_ptr, const int32_t *dep,
                   const double *latency, const double *duration, double *start, double *end) {
    for (int64_t k = 0; k < n; k++) {
        int32_t i = order[k];
        double s = first[i] ? 0.0 : end[i - 1];
        for (int32_t e = dep_ptr[i]; e < dep_ptr[i + 1]; e++) {
            double t = end[dep[e]] + latency[e];
            if (t > s) s = t;
        }
        start[i] = s;
        end[i] = s + duration[i];
    }
}

/* The list scheduler of pipesim/autoschedule/greedy.py (``list_schedule``), step for step
 * and float for float: the same wake-ups popped in the same order (a heap of (time,
 * rank)), the same choices, the same sums. See there for what each step means. Integer
 * parameters ip: pp, S, M, C, split, late_first, banker, b_first, unblock, w_first,
 * heap capacity; double parameters dp: comm, what an F, a B and a W add to the rank's live
 * activations (Problem.deltas), a B's room (Problem.b_room), limit (+ EPS), fill, bound. Slots of (rank, chunk) k are slot_i/slot_s[slot_off[k] .. slot_off[k+1]);
 * per (mb, stage) tables are mb * S + stage; per (rank, mb) ones rank * M + mb. Rank r
 * writes its ops at out_off[r] on, out_n[r] of them. Returns 0 when every op was placed,
 * 1 for none (stuck, or cut by the bound), 2 when the heap ran out of room. */
#define LS_EPS 1e-9

static int ls_less(double ta, int32_t ra, double tb, int32_t rb) { return ta < tb || (ta == tb && ra < rb); }

static int ls_push(double *ht, int32_t *hr, int64_t *n, int64_t cap, double t, int32_t r) {
    if (*n >= cap) return 0;
    int64_t k = (*n)++;
    while (k > 0) {
        int64_t p = (k - 1) / 2;
        if (!ls_less(t, r, ht[p], hr[p])) break;
        ht[k] = ht[p];
        hr[k] = hr[p];
        k = p;
    }
    ht[k] = t;
    hr[k] = r;
    return 1;
}

static void ls_pop(double *ht, int32_t *hr, int64_t *n, double *t, int32_t *r) {
    *t = ht[0];
    *r = hr[0];
    int64_t last = --(*n);
    double lt = ht[last];
    int32_t lr = hr[last];
    int64_t k = 0;
    for (;;) {
        int64_t c = 2 * k + 1;
        if (c >= last) break;
        if (c + 1 < last && ls_less(ht[c + 1], hr[c + 1], ht[c], hr[c])) c++;
        if (!ls_less(ht[c], hr[c], lt, lr)) break;
        ht[k] = ht[c];
        hr[k] = hr[c];
        k = c;
    }
    if (last > 0) {
        ht[k] = lt;
        hr[k] = lr;
    }
}

int64_t pipesim_list_schedule(const int64_t *ip, const double *dp, const double *fcost, const double *bcost,
                              const double *wcost, const int64_t *slot_off, const int32_t *slot_i,
                              const int32_t *slot_s, const int32_t *rank_of, const int32_t *visits, double *left,
                              const double *lat_prev, const double *lat_next, const int64_t *out_off,
                              int32_t *out_kind, int32_t *out_c, int32_t *out_i, double *out_t, double *out_end,
                              int64_t *out_n, int32_t *wq, int64_t *wq_head, int64_t *wq_tail, double *ht,
                              int32_t *hr, double *fend, double *bend, int64_t *fptr, int64_t *bptr, double *live,
                              int64_t *reserved, int32_t *fdone, double *freet, double *first) {
    const int64_t pp = ip[0], S = ip[1], M = ip[2], C = ip[3], split = ip[4];
    const int64_t late_first = ip[5], banker = ip[6], b_first = ip[7], unblock = ip[8], w_first = ip[9];
    const int64_t cap = ip[10];
    const double comm = dp[0], fadd = dp[1], badd = dp[2], wadd = dp[3], broom = dp[4];
    const double limit = dp[5], fill = dp[6], bound = dp[7];
    const double INF = INFINITY;
    int64_t remaining = M * S * (split ? 3 : 2), n = 0;
    for (int32_t r = 0; r < pp; r++) ls_push(ht, hr, &n, cap, 0.0, r);
    int has_idle = 0;
    double idle_t = 0.0;
    int32_t idle_r = -1;
    while (n > 0) {
        double t;
        int32_t r;
        ls_pop(ht, hr, &n, &t, &r);
        const double popped = t; /* the wake-up as pushed: what an idle rank remembers */
        if (has_idle && t == idle_t && r == idle_r) continue;
        if (freet[r] > t + LS_EPS) continue;
        if (freet[r] > t) t = freet[r];
        int64_t bb_c = -1, bb_i = 0, bb_s = 0, bf_c = -1, bf_i = 0, bf_s = 0, bf_key = 0;
        double next_b = INF, next_f = INF;
        int blocked = 0;
        for (int64_t c = 0; c < C; c++) {
            int64_t k = bptr[r * C + c];
            if (k < fptr[r * C + c]) {
                int64_t at = slot_off[r * C + c] + k;
                int64_t i = slot_i[at], s = slot_s[at];
                double a = s == S - 1 ? fend[i * S + s] : bend[i * S + s + 1] + lat_next[i * S + s];
                if (a <= t + LS_EPS) {
                    if (bb_c < 0 || -s < -bb_s || (-s == -bb_s && i < bb_i)) {
                        bb_c = c;
                        bb_i = i;
                        bb_s = s;
                    }
                } else if (a < next_b) {
                    next_b = a;
                }
            }
        }
        int64_t wq_len = wq_tail[r] - wq_head[r];
        double live_r = live[r];
        int b_short = bb_c >= 0 && live_r + badd > limit;
        int relief = wq_len > 0 || bb_c >= 0;
        double room = wq_len > 0 ? 0.0 : broom;
        for (int64_t c = 0; c < C; c++) {
            int64_t k = fptr[r * C + c];
            if (k >= slot_off[r * C + c + 1] - slot_off[r * C + c]) continue;
            int64_t at = slot_off[r * C + c] + k;
            int64_t i = slot_i[at], s = slot_s[at];
            double a = s == 0 ? 0.0 : fend[i * S + s - 1] + lat_prev[i * S + s];
            double need = fadd + room;
            if (!fdone[r * M + i]) {
                int64_t owed = reserved[r] + visits[r * M + i] - 1;
                need += (double)(banker ? owed : (relief ? 0 : (owed < 1 ? owed : 1)));
            }
            int fits = live_r + need <= limit;
            if (a <= t + LS_EPS) {
                if (fits) {
                    int64_t key = late_first ? -s : s;
                    if (bf_c < 0 || key < bf_key || (key == bf_key && i < bf_i)) {
                        bf_c = c;
                        bf_i = i;
                        bf_s = s;
                        bf_key = key;
                    }
                } else {
                    blocked = 1;
                }
            } else {
                if (a < next_f) next_f = a;
                if (unblock && !fits && wq_len > 0 && a <= t + wcost[wq[3 * wq_head[r] + 2]] + LS_EPS) blocked = 1;
            }
        }
        int kind = -1; /* 0 F, 1 B, 2 W */
        int64_t c = 0, i = 0, s = 0;
        if ((w_first && wq_len > 0 && bb_c < 0) || (b_short && wq_len > 0)) {
            kind = 2;
        } else if (bf_c >= 0 && !b_first) {
            kind = 0, c = bf_c, i = bf_i, s = bf_s;
        } else if (unblock && blocked && bf_c < 0 && wq_len > 0) {
            kind = 2;
        } else if (bb_c >= 0 && !b_short) {
            kind = 1, c = bb_c, i = bb_i, s = bb_s;
        } else {
            if (bf_c >= 0) {
                double d = fcost[bf_s];
                if (t + d <= next_b + fill * d + LS_EPS) kind = 0, c = bf_c, i = bf_i, s = bf_s;
            }
            if (kind < 0 && wq_len > 0) {
                double d = wcost[wq[3 * wq_head[r] + 2]];
                int forced = (blocked && bf_c < 0 && next_b == INF) || live_r + badd > limit;
                if (t + d <= next_b + fill * d + LS_EPS || forced) kind = 2;
            }
        }
        if (kind == 2) { /* the rank's oldest pending W */
            int64_t h = wq_head[r]++;
            c = wq[3 * h], i = wq[3 * h + 1], s = wq[3 * h + 2];
        }
        if (kind < 0) {
            has_idle = 1, idle_t = popped, idle_r = r;
            double wake = next_b < next_f ? next_b : next_f;
            if (wake < INF && !ls_push(ht, hr, &n, cap, wake, r)) return 2;
            continue;
        }
        has_idle = 0;
        double d = kind == 0 ? fcost[s] : kind == 1 ? bcost[s] : wcost[s];
        double end = t + d;
        int64_t o = out_off[r] + out_n[r]++;
        out_kind[o] = kind, out_c[o] = (int32_t)c, out_i[o] = (int32_t)i, out_t[o] = t, out_end[o] = end;
        freet[r] = end;
        if (t < first[r]) first[r] = t;
        left[r] -= d;
        if (end - first[r] + left[r] > bound) return 1;
        remaining--;
        if (!ls_push(ht, hr, &n, cap, end, r)) return 2;
        if (kind == 0) {
            fend[i * S + s] = end;
            fptr[r * C + c]++;
            live[r] += fadd;
            if (fdone[r * M + i] == 0)
                reserved[r] += visits[r * M + i] - 1;
            else
                reserved[r] -= 1;
            fdone[r * M + i]++;
            if (s + 1 < S) {
                int32_t r2 = rank_of[i * S + s + 1];
                if (r2 != r && !ls_push(ht, hr, &n, cap, end + comm, r2)) return 2;
            }
        } else if (kind == 1) {
            bend[i * S + s] = end;
            bptr[r * C + c]++;
            live[r] += badd;
            if (split) {
                int64_t q = wq_tail[r]++;
                wq[3 * q] = (int32_t)c, wq[3 * q + 1] = (int32_t)i, wq[3 * q + 2] = (int32_t)s;
            }
            if (s > 0) {
                int32_t r2 = rank_of[i * S + s - 1];
                if (r2 != r && !ls_push(ht, hr, &n, cap, end + comm, r2)) return 2;
            }
        } else {
            live[r] += wadd;
        }
    }
    return remaining ? 1 : 0;
}
