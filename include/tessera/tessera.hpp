#pragma once
// Umbrella header: the whole public C++ API.

#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/bfloat16.hpp"
#include "tessera/check.hpp"
#include "tessera/comm.hpp"
#include "tessera/device.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/node.hpp"
#include "tessera/parallelism.hpp"
#include "tessera/tensor.hpp"
#include "tessera/version.hpp"
#include "tessera/wait_policy.hpp"
