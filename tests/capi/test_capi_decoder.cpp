// Decoder inference (issue 20 item 5): a decoder checkpoint written at tp N (the world
// size) by the C++ API is loaded by load_decoder / load_any_model and by the C API at
// tp N and at tp 1 (ddp replicas), and its logits compared with the training side's:
// bit for bit with the parallel model that saved it at tp N and with the serial model at
// tp 1, and within fp32 rounding of the serial model at tp N. Two decoders: grouped-query
// attention with RoPE and an uneven vocabulary (11; at tp 2 the key/value head is
// repeated and the vocab shards are 6 + 5), and tied embeddings (replicated logits).
// Also: the metadata format tessera-run writes, and the wrong-type errors both ways.
// Runs at 1 and 2 ranks.

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/error.hpp"
#include "tessera/io/checkpoint.hpp"
#include "tessera/mesh.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/load_model.hpp"
#include "tessera/nn/module.hpp"
#include "tessera/tessera.h"
#include "../support/emulator_config.hpp"
#include "capi_check.hpp"
#include "tessera/tp/mappings.hpp"

namespace {

using capi_test::failures;
using capi_test::world_rank;

template <class F>
bool throws_config_error(F&& f) {
  try {
    f();
  } catch (const tessera::ConfigError&) {
    return true;
  } catch (...) {
  }
  return false;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::fmax(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

constexpr std::int64_t kBatch = 2, kSeq = 5;

std::vector<std::int64_t> token_ids(std::int64_t vocab) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(kBatch * kSeq));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((7 * i + 3) % vocab);
  return ids;
}

void check_decoder(const tessera::models::DecoderConfig& config, const std::string& root, int world_size) {
  using namespace tessera;
  const std::vector<std::int64_t> ids = token_ids(config.vocab);
  const Tensor ids_t = Tensor::from_vector(ids, {kBatch, kSeq});

  // The training side: the serial model (every rank, same counter-based init) and the
  // tp-N model that saves the checkpoint, its vocab-sharded logits gathered.
  models::Decoder serial(config);
  nn::initialize_parameters(serial, 17);
  const std::vector<float> serial_logits = serial.forward(ids_t).to_vector<float>();
  std::vector<float> trained_logits;
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, world_size, 1});
    models::Decoder trained(config);
    nn::initialize_parameters(trained, 17);
    bool sharded = false;
    if (world_size > 1) sharded = models::parallelize_decoder(trained, mesh.tp(), false).vocab_sharded_logits;
    Tensor logits = trained.forward(ids_t);
    if (sharded) logits = tp::gather_along(logits, 2, mesh.tp(), config.vocab);
    trained_logits = logits.to_vector<float>();
    io::SaveOptions options;
    options.step = 3;
    options.metadata = models::decoder_metadata(config, "run:\n  seed: 17\n");
    io::save_checkpoint(root, mesh, trained, nullptr, options);
  }
  CHECK(trained_logits.size() == static_cast<std::size_t>(kBatch * kSeq * config.vocab));
  // For test_fortran_decoder: the ids and both references, raw (native byte order).
  if (world_rank == 0) {
    std::FILE* f = std::fopen((root + ".ref").c_str(), "wb");
    CHECK(f != nullptr);
    if (f) {
      CHECK(std::fwrite(ids.data(), sizeof(std::int64_t), ids.size(), f) == ids.size());
      CHECK(std::fwrite(serial_logits.data(), sizeof(float), serial_logits.size(), f) == serial_logits.size());
      CHECK(std::fwrite(trained_logits.data(), sizeof(float), trained_logits.size(), f) == trained_logits.size());
      std::fclose(f);
    }
  }
  CHECK(max_abs_diff(trained_logits, serial_logits) < 1e-5);

  // C++: tp N (bit-identical to the model that saved it) and tp 1 (to the serial model).
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, world_size, 1});
    auto decoder = load_decoder(root, mesh);
    CHECK(decoder->config().vocab == config.vocab && decoder->config().kv_heads() == config.kv_heads());
    const Tensor logits = decoder->logits(ids_t);
    CHECK((logits.shape() == Shape{kBatch, kSeq, config.vocab}));
    CHECK(same_bits(logits.to_vector<float>(), trained_logits));
    CHECK(max_abs_diff(logits.to_vector<float>(), serial_logits) < 1e-5);
    models::LoadedModel any = load_any_model(root, mesh);
    CHECK(any.type == models::ModelType::decoder && any.decoder && !any.emulator);
    if (any.decoder) CHECK(same_bits(any.decoder->logits(ids_t).to_vector<float>(), trained_logits));
    CHECK(throws_config_error([&] { (void)load_model(root, mesh); }));
  }
  {
    Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::ddp, 1, 1});
    auto decoder = load_decoder(root, mesh);
    CHECK(same_bits(decoder->logits(ids_t).to_vector<float>(), serial_logits));
  }

  // C: the same two layouts.
  for (const int tensor : {world_size, 1}) {
    const std::vector<float>& expected = tensor == 1 ? serial_logits : trained_logits;
    tessera_mesh_t* cmesh = nullptr;
    tessera_model_t* model = nullptr;
    EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, tensor == 1 && world_size > 1 ? TESSERA_DATA_DDP : TESSERA_DATA_NONE,
                                      tensor, 1, &cmesh),
                  TESSERA_OK);
    EXPECT_STATUS(tessera_model_load(cmesh, root.c_str(), &model), TESSERA_OK);
    EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);  // the model keeps the mesh alive
    int type = -1;
    std::int64_t vocab = 0;
    EXPECT_STATUS(tessera_model_type(model, &type), TESSERA_OK);
    CHECK(type == TESSERA_MODEL_DECODER);
    EXPECT_STATUS(tessera_model_vocab(model, &vocab), TESSERA_OK);
    CHECK(vocab == config.vocab);
    std::vector<float> logits(expected.size(), -1.f);
    EXPECT_STATUS(tessera_model_logits(model, ids.data(), kBatch, kSeq, logits.data(), vocab), TESSERA_OK);
    CHECK(same_bits(logits, expected));
    // One sequence: the first row of the batch (causal, rows independent).
    std::vector<float> first(static_cast<std::size_t>(kSeq * vocab));
    EXPECT_STATUS(tessera_model_logits(model, ids.data(), 1, kSeq, first.data(), vocab), TESSERA_OK);
    CHECK(max_abs_diff(first, std::vector<float>(expected.begin(), expected.begin() + kSeq * vocab)) < 1e-6);

    // Errors, agreed on every rank.
    std::vector<float> y(16, 0.f);
    const std::int64_t shape[4] = {1, 1, 2, 8};
    EXPECT_STATUS(tessera_model_predict(model, y.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "decoder") != nullptr);
    EXPECT_STATUS(tessera_model_forward(model, y.data(), y.data(), TESSERA_F32, TESSERA_ORDER_C, 4, shape),
                  TESSERA_ERR_INVALID_ARGUMENT);
    std::int64_t a = 0, b = 0, c = 0, d = 0;
    EXPECT_STATUS(tessera_model_info(model, &a, &b, &c), TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "decoder") != nullptr);
    EXPECT_STATUS(tessera_model_box(model, &a, &b, &c, &d), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_logits(model, ids.data(), kBatch, kSeq, logits.data(), vocab + 1), TESSERA_ERR_SHAPE);
    CHECK(std::strstr(tessera_last_error(), "vocab") != nullptr);
    EXPECT_STATUS(tessera_model_logits(model, ids.data(), 0, kSeq, logits.data(), vocab), TESSERA_ERR_INVALID_ARGUMENT);
    std::vector<std::int64_t> bad = ids;
    if (world_rank == 0) bad[3] = vocab;  // one rank's bad id fails every rank
    EXPECT_STATUS(tessera_model_logits(model, bad.data(), kBatch, kSeq, logits.data(), vocab),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(world_rank != 0 || std::strstr(tessera_last_error(), "token id") != nullptr);
    if (tensor > 1) {
      EXPECT_STATUS(tessera_model_logits(model, ids.data(), world_rank == 0 ? 1 : 2, kSeq, logits.data(), vocab),
                    TESSERA_ERR_SHAPE);
      // One rank's own argument error: it used to leave the other tp ranks waiting in the
      // comparison of (batch, seq), a tp all-reduce inside the argument agreement.
      EXPECT_STATUS(tessera_model_logits(model, ids.data(), kBatch, kSeq, world_rank == 0 ? nullptr : logits.data(),
                                         vocab),
                    TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(world_rank != 0 || std::strstr(tessera_last_error(), "logits") != nullptr);
    }
    EXPECT_STATUS(tessera_model_logits(nullptr, ids.data(), kBatch, kSeq, logits.data(), vocab),
                  TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = capi_test::init_mpi(argc, argv, "capi_decoder");
  const int world_size = capi_test::world_size;
  {
    using namespace tessera;
    if (world_rank == 0) std::filesystem::remove_all(dir);
    MPI_Barrier(MPI_COMM_WORLD);

    // The metadata exactly as tessera-run writes it (tools/tessera-run/train_decoder.cpp).
    const std::string written = "model:\n  type: decoder\n  vocab: 11\n  d_model: 8\n  n_heads: 2\n  hidden: 12\n"
                                "  n_layers: 2\n  eps: 1.0000000000000001e-05\n  tie_embeddings: false\n"
                                "  n_kv_heads: 1\n  rope: true\n  rope_theta: 10000\nrun:\n  seed: 1\n";
    const models::DecoderConfig gqa = models::decoder_config_from_metadata(written, "written");
    CHECK(gqa.vocab == 11 && gqa.d_model == 8 && gqa.n_heads == 2 && gqa.hidden == 12 && gqa.n_layers == 2 &&
          gqa.eps == 1e-5 && !gqa.tie_embeddings && gqa.n_kv_heads == 1 && gqa.rope && gqa.rope_theta == 10000.0);
    CHECK(models::decoder_metadata(gqa, "run:\n  seed: 1\n") == written);
    CHECK(models::model_type_from_metadata(written, "written") == models::ModelType::decoder);
    CHECK(throws_config_error([] { (void)models::decoder_config_from_metadata("model:\n  type: decoder\n", "m"); }));
    CHECK(throws_config_error([] { (void)models::model_type_from_metadata("model:\n  type: gpt\n", "m"); }));

    check_decoder(gqa, dir + "/gqa", world_size);
    models::DecoderConfig tied;
    tied.vocab = 10;
    tied.d_model = 8;
    tied.n_heads = 2;
    tied.hidden = 16;
    tied.n_layers = 1;
    tied.tie_embeddings = true;
    check_decoder(tied, dir + "/tied", world_size);

    // A field emulator's checkpoint: the token calls name its type.
    {
      Mesh mesh(MPI_COMM_WORLD, ParallelismConfig{DataParallelMode::none, 1, world_size});
      models::FieldEmulator emulator(tessera::testing::small_emulator_config(8, 8), mesh);
      nn::initialize_parameters(emulator, 5);
      tessera::testing::save_emulator(dir + "/emulator", mesh, emulator, /*step=*/0);
      CHECK(throws_config_error([&] { (void)load_decoder(dir + "/emulator", mesh); }));
      CHECK(load_any_model(dir + "/emulator", mesh).type == models::ModelType::field_emulator);
    }
    tessera_mesh_t* cmesh = nullptr;
    tessera_model_t* model = nullptr;
    EXPECT_STATUS(tessera_mesh_create(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, world_size, &cmesh), TESSERA_OK);
    EXPECT_STATUS(tessera_model_load(cmesh, (dir + "/emulator").c_str(), &model), TESSERA_OK);
    int type = -1;
    EXPECT_STATUS(tessera_model_type(model, &type), TESSERA_OK);
    CHECK(type == TESSERA_MODEL_FIELD_EMULATOR);
    const std::vector<std::int64_t> ids = token_ids(10);
    std::vector<float> logits(static_cast<std::size_t>(kBatch * kSeq * 10));
    EXPECT_STATUS(tessera_model_logits(model, ids.data(), kBatch, kSeq, logits.data(), 10),
                  TESSERA_ERR_INVALID_ARGUMENT);
    CHECK(std::strstr(tessera_last_error(), "field_emulator") != nullptr);
    std::int64_t vocab = 0;
    EXPECT_STATUS(tessera_model_vocab(model, &vocab), TESSERA_ERR_INVALID_ARGUMENT);
    EXPECT_STATUS(tessera_model_destroy(&model), TESSERA_OK);
    // A decoder on a mesh with a domain split.
    if (world_size > 1) {
      EXPECT_STATUS(tessera_model_load(cmesh, (dir + "/tied").c_str(), &model), TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "domain") != nullptr);
    }
    EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);
    // A decoder on a mesh with pipeline stages (domain 1): refused, naming the pipeline.
    if (world_size % 2 == 0) {
      EXPECT_STATUS(tessera_mesh_create_pipeline(MPI_COMM_WORLD, TESSERA_DATA_NONE, 1, 1, 2, &cmesh), TESSERA_OK);
      EXPECT_STATUS(tessera_model_load(cmesh, (dir + "/tied").c_str(), &model), TESSERA_ERR_INVALID_ARGUMENT);
      CHECK(std::strstr(tessera_last_error(), "and pipeline 2") != nullptr);
      CHECK(model == nullptr);
      EXPECT_STATUS(tessera_mesh_destroy(&cmesh), TESSERA_OK);
    }
  }
  return capi_test::finish("test_capi_decoder");
}
