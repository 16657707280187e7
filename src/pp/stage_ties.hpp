#pragma once
// The tied parameters of one pipeline stage at run time (tessera/pp/tied_parameters.hpp
// says what a tie is and when its messages go).

#include <memory>
#include <vector>

#include "tessera/comm.hpp"
#include "tessera/pp/pipeline.hpp"
#include "tessera/pp/stages.hpp"
#include "tessera/pp/tied_parameters.hpp"

namespace tessera::pp::detail {

class StageTies {
 public:
  // Before keep_stage, while every rank holds the whole model: resolves each tie (its
  // parameter's unit and stage, its reader's stage) and points the reader at the
  // parameter, or, on a reader's stage without the owner, at a replica of the
  // parameter's local block. The checks read only the model and the split, which are
  // the same on every rank, so a refused tie raises InvalidArgument on every rank.
  // Messages use tags first_tag, first_tag + 1, ... (above the pipeline's own).
  StageTies(nn::Module& model, const StageSplit& split, int stage, const std::vector<TiedParameter>& tied,
            int first_tag);

  // Start of train_step and evaluate, before stage 0 looks at its batch: the owner's
  // stage posts the value's send (added to `sends`, completed with the step's), the
  // reader's stage posts its receive. Both are posted whatever the step turns out to be,
  // so a step that stage 0 refuses still completes them and leaves nothing in flight.
  void post_values(Communicator& pp, std::vector<CommRequest>& sends);
  // Before the stage's first forward: the received values into the replicas.
  void receive_values();
  // End of train_step, after the last backward: the reader's stage sends the replica's
  // gradient and zeroes it; the owner's stage adds it into the parameter's gradient.
  void reduce_gradients(Communicator& pp);
  // The replicas' values and gradients, in bytes (Pipeline::tied_replica_bytes).
  TiedReplicaBytes replica_bytes() const;

 private:
  struct Tie {
    int owner_stage = 0, reader_stage = 0;
    int value_tag = 0, gradient_tag = 0;
    bool trainable = true;                // the owner's: a frozen one sends no gradient
    Parameter* owned = nullptr;           // on the owner's stage
    std::unique_ptr<Parameter> replica;   // on the reader's stage, when it is another
    Tensor incoming;                      // the value in flight to the replica (host)
    CommRequest value_request;
  };
  int stage_ = 0;
  std::vector<Tie> ties_;
};

}  // namespace tessera::pp::detail
