#pragma once
// Umbrella header: the whole public C++ API that is built today.
//
// Floors, from the ground up: core (errors, tensors, placement, parameters,
// initialisation, ops), backend and comm, mesh and nn, tp. Headers under detail/ are
// implementation helpers shared by host and device code and are not included here.

// core
#include "tessera/bfloat16.hpp"
#include "tessera/check.hpp"
#include "tessera/device.hpp"
#include "tessera/dtype.hpp"
#include "tessera/error.hpp"
#include "tessera/init.hpp"
#include "tessera/ops.hpp"
#include "tessera/parameter.hpp"
#include "tessera/placement.hpp"
#include "tessera/tensor.hpp"
#include "tessera/version.hpp"

// backend and comm
#include "tessera/agree.hpp"
#include "tessera/backend.hpp"
#include "tessera/comm.hpp"
#include "tessera/node.hpp"
#include "tessera/wait_policy.hpp"

// mesh
#include "tessera/mesh.hpp"
#include "tessera/parallelism.hpp"

// nn: serial reference layers, explicit forward/backward
#include "tessera/nn/activation.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"

// training utilities over (possibly sharded) parameters
#include "tessera/clip.hpp"
#include "tessera/optim.hpp"

// tp: tensor parallelism
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/sharding.hpp"
