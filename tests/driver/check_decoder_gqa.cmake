# tessera-run with a current decoder (model.n_kv_heads, model.rope, model.rope_theta), run
# with cmake -P (CTest driver_decoder_gqa). Arguments (-D): MPIEXEC, NUMPROC_FLAG, RUN
# (tessera-run), CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR.
#   1. docs/driver.md shows examples/configs/decoder_gqa.yaml whole, and it trains at tp 2
#      below the unigram baseline;
#   2. the same GQA + RoPE training at tp 1 and tp 2 (sequence parallel) ends with the
#      same weights (within 1e-4), with repeated (n_kv_heads 1) and split (n_kv_heads 2) key/value heads;
#   3. bad values are errors naming the key, before any step.

set(dtiny "${SOURCE_DIR}/tests/driver/decoder_tiny.yaml")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/driver_support.cmake")

# 1. The worked example.
set(example "${SOURCE_DIR}/examples/configs/decoder_gqa.yaml")
expect_shown_whole("${SOURCE_DIR}/docs/driver.md" "${example}")
must_train(2 out "${example}" "--set=checkpoint.dir=")
foreach(expect "n_kv_heads=2, rope_theta=10000" "key/value heads split over tp" "final loss [^\n]*\\(below")
  if(NOT out MATCHES "${expect}")
    message(FATAL_ERROR "examples/configs/decoder_gqa.yaml: expected '${expect}':\n${out}")
  endif()
endforeach()
message(STATUS "examples/configs/decoder_gqa.yaml: ok")

# 2. Serial twin through the driver: tp 1 against tp 2, checkpoints compared.
set(gqa ${dtiny} --set=checkpoint.interval=0 --set=model.n_heads=4 --set=model.rope=true
        --set=model.rope_theta=500)
foreach(kv 1 2)
  must_train(1 out ${gqa} --set=model.n_kv_heads=${kv} --set=parallelism.tensor=1
             "--set=checkpoint.dir=${WORK_DIR}/kv${kv}_tp1")
  must_train(2 out ${gqa} --set=model.n_kv_heads=${kv} "--set=checkpoint.dir=${WORK_DIR}/kv${kv}_tp2")
  set(how "split")
  if(kv EQUAL 1)
    set(how "repeated")
  endif()
  if(NOT out MATCHES "key/value heads ${how} over tp" OR NOT out MATCHES "sequence parallel on")
    message(FATAL_ERROR "n_kv_heads ${kv} at tp 2: expected ${how} key/value heads with sequence parallelism:\n${out}")
  endif()
  # 8 AdamW steps of lr <= 1e-2: fp32 rounding reaches ~2e-5 where an element's
  # gradient is nearly zero (AdamW divides by its root mean square), while any wrong
  # gradient direction moves weights by O(lr) = 1e-3 per step.
  expect_close("${WORK_DIR}/kv${kv}_tp1" "${WORK_DIR}/kv${kv}_tp2" 1e-4 "n_kv_heads ${kv}: tp 1 and tp 2")
  if(NOT diff_output MATCHES "layers.1.attn.k.weight")
    message(FATAL_ERROR "tessera-ckpt diff kv${kv} lacks the key weights:\n${diff_output}")
  endif()
  message(STATUS "n_kv_heads ${kv} (${how} at tp 2): tp 1 and tp 2 agree")
endforeach()

# 3. Errors naming the key.
foreach(case "--set=model.n_kv_heads=3|model.n_kv_heads \\(3\\) must divide model.n_heads \\(4\\)"
             "--set=model.n_kv_heads=0|model.n_kv_heads[^\n]*>= 1"
             "--set=model.d_model=12|model.rope needs an even head dimension"
             "--set=model.rope_theta=0|model.rope_theta[^\n]*> 0"
             "--set=model.rope=maybe|model.rope")
  unpack("${case}" set expect)
  expect_error(2 "tessera-run: error: [^\n]*${expect}" ${gqa} ${set} "--set=checkpoint.dir=")
  if(last_output MATCHES "\nstep ")
    message(FATAL_ERROR "${set}: the error came after training began:\n${last_output}")
  endif()
endforeach()
message(STATUS "bad values: ok")
