#pragma once
// A parameter read by a unit other than its owner, across pipeline stages (a tied LM
// head reads the embedding's table: the embedding is the first unit of the model and the
// head the last, so with two or more stages they live on different stages).
//
// Without a pipeline both units read one Parameter. With one, the owner's stage keeps the
// parameter (it is trained, checkpointed and data-parallel like any other, under its own
// FQN), and the reader's stage keeps a replica that is not a parameter of the stage:
//   - at the start of every train_step and evaluate the owner's stage sends the current
//     value to the reader's stage (so an optimizer step, an initialisation or a
//     checkpoint load of the owner reaches the replica before it is read);
//   - at the end of train_step, after the last backward, the reader's stage sends the
//     replica's gradient (the step's microbatches summed) to the owner's stage, which
//     adds it into the parameter's gradient, and zeroes the replica's.
// So the owner's gradient holds both uses, before DataParallel::finish_gradient_sync
// averages it over dp, and the checkpoint holds the parameter once, as the model without
// a pipeline does: a checkpoint written at one pipeline size loads at any other.
//
// The owner must also declare the parameter tied (nn::Module::tied_parameter_paths, on a
// module above both units), so that data parallelism reduces its gradient only in
// finish_gradient_sync, after the reader's share has been added. The messages are host
// tensors over MPI on mesh.pp() (a device parameter is staged through the host): the
// owner and the reader need not be neighbours, and NCCL channels match in posting order.

#include <string>

#include "tessera/parameter.hpp"

namespace tessera::pp {

// Implemented by a unit that reads a parameter another unit owns (models::TiedHead).
class ParameterReader {
 public:
  virtual ~ParameterReader() = default;
  // The parameter to read, and to accumulate its gradient into, from now on: the
  // owner's own on the owner's stage, the pipeline's replica on another stage. It
  // outlives the reader's use of it.
  virtual void read_from(Parameter& parameter) = 0;
};

// PipelineOptions::tied: `parameter` is the owner's FQN in the model ("embed.weight"),
// `reader` the dotted path of the unit that reads it ("head"), a ParameterReader.
struct TiedParameter {
  std::string parameter;
  std::string reader;
};

}  // namespace tessera::pp
