#pragma once
// Asynchronous checkpoint saves (docs/checkpoint-format.md, "Asynchronous saves"): the
// training loop stands still only while the step's tensors are copied into a host
// snapshot (pinned host memory for device tensors, reused from save to save); a writer
// thread then writes the snapshot with the synchronous save's own code, so the files,
// the MANIFEST, the checksums and the commit (`latest` moved last) are the same.
//
//   io::AsyncCheckpointer saver(mesh);              // collective: checks the MPI thread level
//   for (...) {
//     step();
//     if (time_to_save) saver.save(root, model, &optimizer, options);  // returns once copied
//   }
//   saver.wait();                                   // the last save is committed (or throws)
//
// At most one save is in flight: save() first waits for the previous one (and reports how
// long it waited). A failure of the background write is the same error on every rank
// (the writer agrees on it like a synchronous save) and is thrown by the next save() or
// wait() on every rank; committed checkpoints and `latest` are untouched by it, and a
// process killed during the write leaves them as they were (the write goes into a
// temporary directory; see checkpoint.hpp).
//
// Requirements, checked by the constructor (ConfigError on every rank, never a silent
// synchronous save): MPI initialised with MPI_THREAD_MULTIPLE (MPI_Init_thread), since
// the writer communicates (agreement, checksum sums, the commit) while the training
// thread does. The writer uses its own duplicate of the mesh's world communicator, so
// its messages never match the training's. HDF5 is not thread-safe: the writer holds
// io::hdf5_mutex() while it writes (hdf5_lock.hpp); a program that calls HDF5 itself
// during training takes that mutex around those calls.

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/optim.hpp"

namespace tessera::io {

namespace detail {
class SnapshotBuffers;
}

// What one save() did on the calling thread.
struct AsyncSaveStarted {
  std::string directory;         // the step directory the background write commits
  double waited_seconds = 0;     // waiting for the previous save to finish (0: none in flight)
  std::string previous;          // the directory that previous save committed ("" when none)
  double snapshot_seconds = 0;   // copying the tensors and the cross-rank checks
  std::size_t snapshot_bytes = 0;  // this rank's snapshot
};

// What the background write did, once it finished.
struct AsyncSaveFinished {
  std::string directory;       // committed
  double write_seconds = 0;    // from the writer's start to the commit
};

class AsyncCheckpointer {
 public:
  // Collective over mesh.world(). ConfigError on every rank when MPI runs below
  // MPI_THREAD_MULTIPLE. `on_finished`, when given, is called on the writer thread of
  // every rank after each commit (a log line, say; it must be thread-safe).
  explicit AsyncCheckpointer(const Mesh& mesh, std::function<void(const AsyncSaveFinished&)> on_finished = {});
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;
  // Waits for the save in flight; its error, if any, is printed to stderr (a destructor
  // cannot throw). Call wait() first to see it as an exception.
  ~AsyncCheckpointer();

  // Collective over the mesh's world, like save_checkpoint. Waits for the previous save
  // (rethrowing its error), copies the tensors into the snapshot, checks them across
  // ranks as a synchronous save does (its errors are thrown here, on every rank), and
  // starts the background write of root/step_<options.step>/.
  AsyncSaveStarted save(const std::string& root, const NamedParameters& params, Optimizer* optimizer,
                        const SaveOptions& options);
  AsyncSaveStarted save(const std::string& root, nn::Module& model, Optimizer* optimizer = nullptr,
                        const SaveOptions& options = {});

  // Waits for the save in flight, if any. Returns the directory it committed ("" when none
  // was in flight); throws its error (the same on every rank). Call on every rank.
  std::string wait();
  // Whether a save was started and not yet waited for (it may have finished already).
  bool in_flight() const { return writer_.joinable(); }

 private:
  const Mesh& mesh_;
  std::unique_ptr<Communicator> writer_comm_;  // the writer's duplicate of mesh.world()
  std::unique_ptr<detail::SnapshotBuffers> snapshot_;
  std::function<void(const AsyncSaveFinished&)> on_finished_;
  std::thread writer_;
  std::exception_ptr error_;   // set by the writer, read after join
  std::string committed_;      // set by the writer, read after join
};

// "MPI_THREAD_MULTIPLE" ...; for messages.
std::string mpi_thread_level_name(int level);

}  // namespace tessera::io
