// The plan of a batch of derivative sums, made on the host by prune.c (the
// decision the device plan, src/cuda/plan.cu, applies the same bounds of):
// the units each block of `block` queries visits, as lists.
#pragma once
#include <stdint.h>
#include <vector>
#include "prune.h"

static void host_plan(const kde_prune_plan &p, const std::vector<double> &q, int64_t m,
                      int64_t block, std::vector<int64_t> &offset, std::vector<int32_t> &visit)
{
  offset.assign((size_t) ((m + block - 1) / block + 1), 0);
  kde_plan_query_blocks(&p, q.data(), m, 0, m, block, 1, offset.data(), nullptr);
  visit.assign((size_t) (offset.back() > 0 ? offset.back() : 1), 0);
  kde_plan_query_blocks(&p, q.data(), m, 0, m, block, 1, offset.data(), visit.data());
}
