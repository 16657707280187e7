#pragma once
// Private to the C API: the model-rank choice of tessera_redist_create and
// tessera_model_load_coupled (include/tessera/tessera_coupling.h), shared by both.

#include "tessera/domain/redistribution.hpp"

namespace tessera::capi {

// nmodel = 0 and ranks NULL: one per GPU per node; ranks NULL: a count; otherwise the
// list of nmodel ranks. Errors (a negative count, an empty list) are the plan's, agreed.
domain::ModelRanks model_ranks_of(int nmodel, const int* ranks);

}  // namespace tessera::capi
