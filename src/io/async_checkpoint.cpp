// Asynchronous saves (tessera/io/async_checkpoint.hpp): the snapshot on the calling
// thread, then the synchronous save's writer (write_prepared_save) on a thread of its
// own, over a communicator of its own.
#include "tessera/io/async_checkpoint.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include "io/checkpoint_save.hpp"
#include "io/checkpoint_snapshot.hpp"
#include "tessera/agree.hpp"
#include "tessera/io/hdf5_lock.hpp"

namespace tessera::io {

using detail::PreparedSave;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The writer yields the CPU to the training thread when both want it: on a node where
// every core runs a rank, the checksums and the page-cache copies of the write would
// otherwise slow the steps down as much as they speed the save up. Linux applies a nice
// value per thread; where that fails the writer simply runs at the training's priority.
void lower_writer_priority() {
#ifdef SYS_gettid
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  (void)::setpriority(PRIO_PROCESS, tid, 10);
#endif
}

}  // namespace

std::string mpi_thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "thread level " + std::to_string(level);
  }
}

AsyncCheckpointer::AsyncCheckpointer(const Mesh& mesh, std::function<void(const AsyncSaveFinished&)> on_finished)
    : mesh_(mesh), snapshot_(std::make_unique<detail::SnapshotBuffers>()), on_finished_(std::move(on_finished)) {
  Communicator& world = mesh.world();
  agree_on_success(world.mpi_comm(), [&] {
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    // The writer's agreement and checksum sums run while the training thread
    // communicates: anything below MULTIPLE makes that undefined (MPICH and Open MPI
    // then corrupt or hang), so refuse rather than save synchronously behind the
    // caller's back.
    if (level < MPI_THREAD_MULTIPLE) {
      throw ConfigError("asynchronous checkpoints need MPI initialised with MPI_THREAD_MULTIPLE (MPI_Init_thread); "
                        "this process runs at " + mpi_thread_level_name(level) +
                        ": initialise MPI with MPI_THREAD_MULTIPLE or save synchronously (checkpoint.async: false)");
    }
  });
  writer_comm_ = std::make_unique<Communicator>(world.mpi_comm(), world.wait_options());
}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (!writer_.joinable()) return;
  writer_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: asynchronous checkpoint failed (not waited for): %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "tessera: asynchronous checkpoint failed (not waited for)\n");
    }
  }
}

std::string AsyncCheckpointer::wait() {
  if (!writer_.joinable()) return "";
  writer_.join();
  std::string committed = std::move(committed_);
  committed_.clear();
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
  return committed;
}

AsyncSaveStarted AsyncCheckpointer::save(const std::string& root, const NamedParameters& params, Optimizer* optimizer,
                                         const SaveOptions& options) {
  AsyncSaveStarted started;
  const auto t0 = std::chrono::steady_clock::now();
  if (in_flight()) {
    started.previous = wait();  // one save in flight at most: its snapshot buffers are reused now
    started.waited_seconds = seconds_since(t0);
  }
  const auto t1 = std::chrono::steady_clock::now();
  PreparedSave prepared = detail::prepare_save(root, mesh_, params, optimizer, options, snapshot_.get());
  started.directory = prepared.final_dir;
  started.snapshot_seconds = seconds_since(t1);
  started.snapshot_bytes = snapshot_->bytes();
  writer_ = std::thread([this, save = std::move(prepared)]() mutable {
    const auto start = std::chrono::steady_clock::now();
    lower_writer_priority();
    try {
      std::lock_guard<std::recursive_mutex> hdf5(hdf5_mutex());
      committed_ = detail::write_prepared_save(save, *writer_comm_);
    } catch (...) {
      error_ = std::current_exception();
      return;
    }
    // An exception leaving a thread's function ends the process: the callback's is
    // reported like a failed write instead (the checkpoint itself is committed).
    if (!on_finished_) return;
    try {
      on_finished_(AsyncSaveFinished{committed_, seconds_since(start)});
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return started;
}

AsyncSaveStarted AsyncCheckpointer::save(const std::string& root, nn::Module& model, Optimizer* optimizer,
                                         const SaveOptions& options) {
  return save(root, model.named_parameters(), optimizer, options);
}

}  // namespace tessera::io
