// Serial parts of pipeline parallelism: the schedules' action lists, stage splits by
// layer count and by cut points (nested Sequentials), keep_stage, the
// `parallelism.pipeline` key, and the four-dimensional rank formula.

#include <gtest/gtest.h>

#include <climits>

#include "pp_test_util.hpp"
#include "tessera/error.hpp"
#include "tessera/mesh.hpp"
#include "tessera/parallelism.hpp"

using namespace tessera;
using namespace tessera::testing;
using pp::Schedule;

namespace {

TEST(PipelineSchedule, ActionLists) {
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::gpipe, 0, 2, 3)), "F0 F1 F2 B2 B1 B0");
  // p - s warm-up forwards (one more than PipeDream-flush), none on the last stage.
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::one_f_one_b, 0, 4, 6)), "F0 F1 F2 F3 F4 B0 F5 B1 B2 B3 B4 B5");
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::one_f_one_b, 2, 4, 6)), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::one_f_one_b, 3, 4, 3)), "F0 B0 F1 B1 F2 B2");
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::one_f_one_b, 0, 2, 4)), "F0 F1 F2 B0 F3 B1 B2 B3");
  // Fewer microbatches than warm-up slots: all forwards, then all backwards.
  EXPECT_EQ(pp::actions_str(pp::stage_actions(Schedule::one_f_one_b, 0, 4, 2)), "F0 F1 B0 B1");
}

TEST(PipelineSchedule, EveryMicrobatchOnceAndBoundedInFlight) {
  for (auto schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    for (int p : {1, 2, 4}) {
      for (int m : {1, 2, 5, 8}) {
        for (int s = 0; s < p; ++s) {
          const auto actions = pp::stage_actions(schedule, s, p, m);
          std::vector<int> forwards(m, 0), backwards(m, 0);
          int in_flight = 0, peak = 0;
          for (const auto& a : actions) {
            if (a.kind == pp::Action::Kind::forward) {
              ++forwards[a.microbatch];
              peak = std::max(peak, ++in_flight);
            } else {
              EXPECT_EQ(forwards[a.microbatch], 1) << "backward before forward";
              ++backwards[a.microbatch];
              --in_flight;
            }
          }
          for (int j = 0; j < m; ++j) EXPECT_EQ(forwards[j] + backwards[j], 2);
          const int one_f_one_b_peak = s == p - 1 ? 1 : std::min(p - s + 1, m);
          EXPECT_EQ(peak, schedule == Schedule::gpipe ? m : one_f_one_b_peak) << "stage " << s;
          EXPECT_EQ(pp::peak_in_flight(actions), peak) << "stage " << s;
        }
      }
    }
  }
  EXPECT_DOUBLE_EQ(pp::schedule_bubble_fraction(4, 8), 3.0 / 11.0);
  EXPECT_THROW(pp::stage_actions(Schedule::gpipe, 2, 2, 1), InvalidArgument);
  EXPECT_THROW(pp::stage_actions(Schedule::gpipe, 0, 2, 0), InvalidArgument);
  EXPECT_EQ(pp::parse_schedule("1f1b"), Schedule::one_f_one_b);
  EXPECT_THROW(pp::parse_schedule("interleaved", "pipeline.schedule"), ConfigError);  // a config value: detail::parse_enum
}

TEST(PipelineStages, SplitByCountAndCutPoints) {
  auto model = make_blocks_model();
  EXPECT_EQ(pp::pipeline_units(*model), (std::vector<std::string>{"0.0", "0.1", "0.2", "1.0", "1.1", "1.2", "2", "3"}));
  EXPECT_EQ(pp::split_by_layer_count(*model, 3).str(), "stage 0: 0.0 0.1 0.2 | stage 1: 1.0 1.1 1.2 | stage 2: 2 3");
  EXPECT_EQ(pp::split_by_layer_count(*model, std::vector<int>{1, 7}).stages[0], (std::vector<std::string>{"0.0"}));
  EXPECT_EQ(pp::split_at(*model, {"0.2", "1", "3"}).str(),
            "stage 0: 0.0 0.1 | stage 1: 0.2 | stage 2: 1.0 1.1 1.2 2 | stage 3: 3");
  EXPECT_EQ(pp::split_at(*model, {}).stages.size(), 1u);
  EXPECT_THROW(pp::split_by_layer_count(*model, 9), InvalidArgument);
  EXPECT_THROW(pp::split_by_layer_count(*model, std::vector<int>{4, 3}), InvalidArgument);
  EXPECT_THROW(pp::split_by_layer_count(*model, std::vector<int>{8, 0}), InvalidArgument);
  try {
    pp::split_at(*model, {"1.7"});
    ADD_FAILURE() << "no error for a cut point that names nothing";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'1.7'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(pp::split_at(*model, {"1", "0.2"}), InvalidArgument);  // out of order
  EXPECT_THROW(pp::split_at(*model, {"0"}), InvalidArgument);         // empty first stage
  nn::Linear lone(2, 2);
  EXPECT_THROW(pp::pipeline_units(lone), InvalidArgument);
}

TEST(PipelineStages, KeepStageDropsOtherStages) {
  auto model = make_blocks_model();
  const auto split = pp::split_at(*model, {"1"});
  pp::keep_stage(*model, split, 1);
  std::vector<std::string> names;
  for (const auto& [n, p] : model->named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"1.0.weight", "1.0.bias", "1.2.weight", "1.2.bias", "2.weight", "2.bias",
                                             "3.weight", "3.bias"}));
  EXPECT_THROW(model->forward(random_tensor({2, kWidth}, 1)), InternalError);  // reaches stage 0's units
  EXPECT_THROW(pp::keep_stage(*model, split, 2), InvalidArgument);
}

TEST(PipelineConfig, PipelineKey) {
  const auto c = ParallelismConfig::from_yaml_string("parallelism: {data: ddp, tensor: 2, pipeline: 2}\n");
  EXPECT_EQ(c.pipeline, 2);
  EXPECT_EQ(c.str(), "{data: ddp, tensor: 2, domain: 1, pipeline: 2}");
  EXPECT_EQ(ParallelismConfig{}.str(), "{data: none, tensor: 1, domain: 1}");
  EXPECT_EQ(dp_world_size(c, 8), 2);
  try {
    ParallelismConfig::from_yaml_string("trainer:\n  parallelism:\n    pipeline: 0\n", "cfg.yaml");
    ADD_FAILURE() << "no error for pipeline 0";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.yaml:3: trainer.parallelism.pipeline"), std::string::npos) << e.what();
  }
  try {
    dp_world_size(c, 6);
    ADD_FAILURE() << "no error for 6 ranks";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pipeline (2) * tensor (2) * domain (1) = 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dp_world_size({DataParallelMode::none, 1, 1, 2}, 4), ConfigError);  // 2 replicas, data none
  EXPECT_THROW((ParallelismConfig{DataParallelMode::none, 65536, 1, 65536}.validate()), ConfigError);
}

TEST(PipelineConfig, RankFormula) {
  // Pipeline outermost: (pp * P + dp) takes dp's place in the three-dimensional formula.
  const MeshShape shape{3, 2, 2, 2};
  for (int g = 0; g < 24; ++g) {
    const MeshCoords c = mesh_coords_of(g, shape);
    EXPECT_EQ(c.domain, g % 2);
    EXPECT_EQ(c.tp, (g / 2) % 2);
    EXPECT_EQ(c.dp, (g / 4) % 2);
    EXPECT_EQ(c.pp, g / 8);
    EXPECT_EQ(mesh_global_rank_of(c, shape), g);
    // Pipeline 1 is the three-dimensional layout.
    const MeshShape flat{1, 6, 2, 2};
    EXPECT_EQ(mesh_coords_of(g, flat), mesh_coords_of(g, 2, 2));
  }
  EXPECT_THROW(mesh_coords_of(24, shape), InvalidArgument);
  EXPECT_THROW(mesh_coords_of(0, MeshShape{0, 1, 1, 1}), InvalidArgument);
  EXPECT_THROW(mesh_coords_of(0, MeshShape{INT_MAX, 2, 1, 1}), InvalidArgument);
  EXPECT_THROW(mesh_global_rank_of(MeshCoords{0, 0, 0, 3}, shape), InvalidArgument);
}

}  // namespace
