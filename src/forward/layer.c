/* layer.c - what every layer kind shares beside its nx_fwd (layer.h): the grouped matmul over the
 * layer's input rows.  The layers (attn.c, gdn_layer.c, the FFN in forward.c) call it; it calls
 * nothing of theirs, so no call goes from a layer back up to the context. */
#include "forward/layer.h"

#include "quant/matmul_groups.h"

bool nx_fwd_matmuls(nx_fwd *f, const float *x, int T, int n, const nx_weight *const *w, float *const *y, nx_err *err) {
    nx_mm_group g[NX_FWD_MAX_MATMULS];
    if (n > NX_FWD_MAX_MATMULS) return nx_fail(err, "nx_fwd_matmuls: %d weights (at most %d)", n, NX_FWD_MAX_MATMULS);
    for (int i = 0; i < n; i++) g[i] = (nx_mm_group){*w[i], x, w[i]->in, NULL, T, y[i]};
    return nx_matmul_groups(f->pool, &f->mmg, g, n, err);
}
