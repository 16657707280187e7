#pragma once
// Umbrella header: the whole public C++ API that is built today.
//
// Floors, from the ground up: core (errors, tensors, placement, parameters,
// initialisation, ops), backend and comm, mesh and nn, tp, domain and io, models.
// Headers under include/tessera/detail/ are implementation helpers shared by host and
// device code and are not included here.

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
#include "tessera/flight_recorder.hpp"
#include "tessera/node.hpp"
#include "tessera/wait_policy.hpp"

// mesh
#include "tessera/mesh.hpp"
#include "tessera/parallelism.hpp"

// nn: serial reference layers, explicit forward/backward
#include "tessera/nn/activation.hpp"
#include "tessera/nn/activation_checkpoint.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/embedding.hpp"
#include "tessera/nn/functional.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/nn/norm.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/swiglu.hpp"

// training utilities over (possibly sharded) parameters
#include "tessera/clip.hpp"
#include "tessera/optim.hpp"

// tp: tensor parallelism
#include "tessera/tp/conv2d.hpp"
#include "tessera/tp/cross_entropy.hpp"
#include "tessera/tp/embedding.hpp"
#include "tessera/tp/linear.hpp"
#include "tessera/tp/lora.hpp"
#include "tessera/tp/mappings.hpp"
#include "tessera/tp/parallelize.hpp"
#include "tessera/tp/sharding.hpp"

// domain: decomposition, halo exchange, domain-parallel layers
#include "tessera/domain/decomposition.hpp"
#include "tessera/domain/conv_halo.hpp"
#include "tessera/domain/domain_conv2d.hpp"
#include "tessera/domain/global_sum.hpp"
#include "tessera/domain/gradient_sync.hpp"
#include "tessera/domain/halo_exchange.hpp"
#include "tessera/domain/halo_index.hpp"
#include "tessera/domain/loss.hpp"
#include "tessera/domain/redistribution.hpp"

// io: sharded HDF5 checkpoints, safetensors and the PyTorch key mapping
#include "tessera/io/checkpoint.hpp"
#include "tessera/io/checkpoint_reader.hpp"
#include "tessera/io/checksum.hpp"
#include "tessera/io/safetensors.hpp"
#include "tessera/io/weight_mapping.hpp"

// dp: data parallelism (ddp, fsdp2), the sampler contract, memory reports
#include "tessera/dp/data_parallel.hpp"
#include "tessera/dp/memory.hpp"
#include "tessera/dp/sampler.hpp"

// pp: pipeline parallelism (stages, schedules, the pipelined training step)
#include "tessera/pp/pipeline.hpp"
#include "tessera/pp/schedule.hpp"
#include "tessera/pp/stages.hpp"

// models: reference models built from the layers above
#include "tessera/models/channel_mlp.hpp"
#include "tessera/models/coupled_model.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/field_emulator.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/train/run_config.hpp"
#include "tessera/train/training_step.hpp"
