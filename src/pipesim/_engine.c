/* The engine's two loops in C (pipesim/kernel.py compiles this at first use and falls
 * back to the same loops in Python without a compiler). Item i's predecessors are
 * dep[dep_ptr[i] .. dep_ptr[i+1]), and the item before it on its rank; items are stored
 * rank after rank, rank r's at offsets[r] .. offsets[r+1]. */
#include <stdint.h>

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
