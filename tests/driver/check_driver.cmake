# Driver checks, run with cmake -P (CTest label `driver`). Arguments (-D):
#   MODE      demo | resume | resume_safety | disk_full | layouts | bad_config | dry_run
#             (the field emulator)
#             accumulate (optimizer.accumulate against bigger batches, both models) |
#             metrics (data.validation, eval_every, logging.metrics_file, plot-metrics) |
#             features_bad_config (their errors) | examples (examples/configs/*.yaml) |
#             hostile_inputs (non-regular files, size bombs, NaN data, lost metrics: issue 46) |
#             async (checkpoint.async: sync-equal checkpoints, kills during the background write)
#             decoder_train | decoder_layouts | decoder_resume | decoder_bad_config |
#             decoder_dry_run | decoder_pipeline (model.type: decoder)
#             device (the `device` key, any machine) | device_cuda (training on a GPU against
#             the host run; prints "SKIPPED: no GPU" when none is visible, which CTest reports
#             as skipped)
#   MPIEXEC, NUMPROC_FLAG, RUN (tessera-run), CKPT (tessera-ckpt), SOURCE_DIR, WORK_DIR
# Every tessera-run call runs in SOURCE_DIR (the configs name data/rossby_haurwitz.h5
# relative to it) and writes checkpoints under WORK_DIR only.

set(tiny "${SOURCE_DIR}/tests/driver/tiny.yaml")
set(dtiny "${SOURCE_DIR}/tests/driver/decoder_tiny.yaml")
set(data "--set=data.path=${SOURCE_DIR}/data/rossby_haurwitz.h5")

include("${CMAKE_CURRENT_LIST_DIR}/driver_support.cmake")

# kill_and_resume(<np> <uninterrupted dir> <dir> ARGS ...): the run killed (SIGKILL on
# every rank) after step 5 leaves step 3 as the last checkpoint; resumed from it, it ends
# with the uninterrupted run's weights and optimizer state, bit for bit.
function(kill_and_resume np full dir)
  run_driver(out rc ${np} ${ARGN} "--set=checkpoint.dir=${dir}" --kill-after-step 5)
  if(rc EQUAL 0)
    message(FATAL_ERROR "the killed run exited 0:\n${out}")
  endif()
  file(READ "${dir}/latest" latest)
  string(STRIP "${latest}" latest)
  if(NOT latest STREQUAL "step_00000003" OR EXISTS "${dir}/step_00000006")
    message(FATAL_ERROR "after the kill, latest is '${latest}' (expected step_00000003)")
  endif()
  expect_success(${np} ${ARGN} "--set=checkpoint.dir=${dir}" --set=resume=latest)
  if(NOT last_output MATCHES "resumed from [^\n]*step_00000003[^\n]* at step 3")
    message(FATAL_ERROR "the resumed run did not report resuming at step 3:\n${last_output}")
  endif()
  expect_identical("${full}" "${dir}" "the resumed run and the uninterrupted run")
endfunction()

# model_weights_unchanged(<A> <B> <out-var>): every /model tensor the two checkpoints
# share is bit-identical; their `tessera-ckpt diff` lines into <out-var>, the whole diff
# into diff_output.
function(model_weights_unchanged a b out_var)
  execute_process(COMMAND ${CKPT} diff "${a}" "${b}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  string(REGEX MATCHALL "\n */model/[A-Za-z0-9_.]+ +max_abs_diff [^\n]+" lines "\n${out}")
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "max_abs_diff 0$")
      message(FATAL_ERROR "${a} -> ${b}: a model tensor moved: ${line}\n${out}")
    endif()
  endforeach()
  set(${out_var} "${lines}" PARENT_SCOPE)
  set(diff_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

if(MODE STREQUAL "demo")
  # The README's claim: the demo trains below the persistence baseline, printed beside it.
  expect_success(4 "${SOURCE_DIR}/data/configs/demo.yaml" "--set=checkpoint.dir=${WORK_DIR}/demo")
  if(NOT last_output MATCHES "final loss ([0-9.e+-]+) persistence ([0-9.e+-]+) ratio ([0-9.]+) \\(below")
    message(FATAL_ERROR "the demo did not end below the persistence baseline:\n${last_output}")
  endif()
  set(ratio "${CMAKE_MATCH_3}")
  if(NOT ratio LESS 0.5)
    message(FATAL_ERROR "the demo's loss is only ${ratio} x persistence (expected < 0.5):\n${last_output}")
  endif()
  string(REGEX MATCHALL "\nstep +[0-9]+/" lines "${last_output}")
  list(LENGTH lines n)
  if(NOT n EQUAL 10 OR NOT last_output MATCHES "samples/s" OR NOT last_output MATCHES "grid points/s")
    message(FATAL_ERROR "expected 10 progress lines with samples/s and grid points/s:\n${last_output}")
  endif()
  if(NOT EXISTS "${WORK_DIR}/demo/step_00000100/checkpoint.h5")
    message(FATAL_ERROR "the demo wrote no final checkpoint under ${WORK_DIR}/demo")
  endif()
  message(STATUS "demo: loss ${ratio} x persistence")

elseif(MODE STREQUAL "resume")
  # Uninterrupted: 8 steps, checkpoints at 3, 6, 8.
  expect_success(4 ${tiny} ${data} "--set=checkpoint.dir=${WORK_DIR}/full")
  # Killed (SIGKILL on every rank) after step 5: the last checkpoint is step 3.
  # Bit-identical weights and optimizer state on the host backend.
  kill_and_resume(4 "${WORK_DIR}/full" "${WORK_DIR}/killed" ${tiny} ${data})
  message(STATUS "resume: bit-identical after kill at step 5 and resume from step 3")

elseif(MODE STREQUAL "init_weights")
  # A fresh run from another run's weights, at another layout, counting from step 0;
  # another architecture is refused naming the key and the differing field. Its weights
  # must start as the source's, bit for bit: plain SGD with lr 1e-46 and gradients
  # clipped to norm 1 moves no fp32 weight (every update, computed in double, is below
  # half the smallest subnormal), so the fresh run's final weights are its initial ones.
  expect_success(2 ${tiny} ${data} "--set=checkpoint.dir=${WORK_DIR}/source" --set=parallelism.domain=1)
  set(frozen --set=optimizer.type=sgd --set=optimizer.lr=1e-46 --set=optimizer.lr_schedule=constant
             --set=optimizer.min_lr=0 --set=optimizer.warmup_steps=0 --set=optimizer.clip_grad_norm=1.0
             --set=schedule.steps=2 --set=checkpoint.interval=0)
  expect_success(2 ${tiny} ${data} ${frozen} "--set=checkpoint.dir=${WORK_DIR}/fresh" --set=parallelism.tensor=1
                 "--set=init_weights=${WORK_DIR}/source")
  if(NOT last_output MATCHES "init_weights: model weights from [^\n]*step_00000008[^\n]*starting at step 0")
    message(FATAL_ERROR "the run did not report its initial weights:\n${last_output}")
  endif()
  if(NOT EXISTS "${WORK_DIR}/fresh/step_00000002/checkpoint.h5")
    message(FATAL_ERROR "the fresh run did not count from step 0 (no step_00000002 under ${WORK_DIR}/fresh)")
  endif()
  model_weights_unchanged("${WORK_DIR}/source" "${WORK_DIR}/fresh" weights)
  list(LENGTH weights n)
  if(n EQUAL 0)
    message(FATAL_ERROR "tessera-ckpt diff listed no model tensors:\n${diff_output}")
  endif()
  # another width
  expect_error(2 "tessera-run: error: init_weights: [^\n]*width" ${tiny} ${data} ${frozen}
               "--set=checkpoint.dir=${WORK_DIR}/wide" --set=parallelism.tensor=1 --set=model.width=16
               "--set=init_weights=${WORK_DIR}/source")
  message(STATUS "init_weights: ${n} weights start bit-identical at another layout")
  # model.eps (issue 43): a decoder trained with eps 1e-5 is fine-tuned with eps 1e-5, and
  # refused naming eps without it; a checkpoint whose metadata predates the key (no
  # `eps:`) holds the old default 1e-6 and starts a run that leaves eps unset.
  set(dec ${dtiny} --set=checkpoint.interval=0 --set=parallelism.tensor=1 --set=schedule.steps=2)
  expect_success(1 ${dec} --set=model.eps=1e-5 "--set=checkpoint.dir=${WORK_DIR}/eps5")
  execute_process(COMMAND ${CKPT} info "${WORK_DIR}/eps5" OUTPUT_VARIABLE info RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT info MATCHES "\\| +eps: 1[.]0000000000000001e-05\n")
    message(FATAL_ERROR "the metadata of a model.eps 1e-5 run does not record it:\n${info}")
  endif()
  expect_success(1 ${dec} ${frozen} --set=model.eps=1e-5 "--set=checkpoint.dir=${WORK_DIR}/eps5_fresh"
                 "--set=init_weights=${WORK_DIR}/eps5")
  model_weights_unchanged("${WORK_DIR}/eps5" "${WORK_DIR}/eps5_fresh" weights)
  expect_error(1 "tessera-run: error: init_weights: [^\n]*eps" ${dec} ${frozen}
               "--set=checkpoint.dir=${WORK_DIR}/eps_default" "--set=init_weights=${WORK_DIR}/eps5")
  foreach(bad 0 -1e-5 nan)
    expect_error(1 "tessera-run: error: [^\n]*model.eps" ${dec} --set=model.eps=${bad} "--set=checkpoint.dir=")
  endforeach()
  execute_process(COMMAND ${CKPT} export "${WORK_DIR}/eps5" "${WORK_DIR}/eps5.safetensors" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE o ERROR_VARIABLE e)
  file(WRITE "${WORK_DIR}/old_meta.yaml" "model:\n  type: decoder\n  vocab: 32\n  d_model: 16\n  n_heads: 2\n"
             "  hidden: 32\n  n_layers: 2\n  tie_embeddings: false\n")
  execute_process(COMMAND ${CKPT} import "${WORK_DIR}/eps5.safetensors" "${WORK_DIR}/old" --metadata
                          "${WORK_DIR}/old_meta.yaml" RESULT_VARIABLE rc2 OUTPUT_VARIABLE o2 ERROR_VARIABLE e2)
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
    message(FATAL_ERROR "export/import with metadata without eps failed:\n${o}${e}${o2}${e2}")
  endif()
  expect_success(1 ${dec} ${frozen} "--set=checkpoint.dir=${WORK_DIR}/old_fresh" "--set=init_weights=${WORK_DIR}/old")
  expect_error(1 "tessera-run: error: init_weights: [^\n]*eps" ${dec} ${frozen} --set=model.eps=1e-5
               "--set=checkpoint.dir=${WORK_DIR}/old_eps5" "--set=init_weights=${WORK_DIR}/old")
  message(STATUS "init_weights: model.eps 1e-5 fine-tunes, other eps refused, a checkpoint without eps reads as 1e-6")

elseif(MODE STREQUAL "lora")
  # Fine-tuning only LoRA adapters on a pretrained decoder (model.lora + init_weights), at
  # tp 2: every base tensor stays bit-identical to the pretrained one through the whole
  # run, the adapters move, and bad lora keys are refused naming the key.
  set(dec ${dtiny} --set=model.sequence_parallel=false --set=checkpoint.interval=0)
  expect_success(2 ${dec} "--set=checkpoint.dir=${WORK_DIR}/base")
  set(lora "--set=model.lora={rank: 2, alpha: 4}" "--set=init_weights=${WORK_DIR}/base")
  expect_success(2 ${dec} ${lora} "--set=checkpoint.dir=${WORK_DIR}/lora" --set=checkpoint.interval=4
                 --set=checkpoint.keep_last=2)
  if(NOT last_output MATCHES "LoRA: rank 2, alpha 4 on 4 layers; [0-9]+ adapter parameters train")
    message(FATAL_ERROR "the LoRA run did not report its adapters:\n${last_output}")
  endif()
  model_weights_unchanged("${WORK_DIR}/base" "${WORK_DIR}/lora" base_tensors)
  list(LENGTH base_tensors n)
  string(REGEX MATCHALL "lora_[AB][.]weight +only in B" adapters "${diff_output}")
  list(LENGTH adapters n_adapters)
  if(n LESS 10 OR NOT n_adapters EQUAL 8)
    message(FATAL_ERROR "expected the base's tensors in both and 8 adapters only in the LoRA run:\n${diff_output}")
  endif()
  execute_process(COMMAND ${CKPT} diff "${WORK_DIR}/lora/step_00000004" "${WORK_DIR}/lora/step_00000008"
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT out MATCHES "lora_B[.]weight +max_abs_diff [1-9]" AND NOT out MATCHES "lora_B[.]weight +max_abs_diff 0[.]0*[1-9]")
    message(FATAL_ERROR "the adapters did not move between steps 4 and 8:\n${out}")
  endif()
  foreach(case "{rank: 0}|model.lora.rank" "{alpha: 2}|model.lora.rank is required" "{rank: 2, bogus: 1}|unknown key 'bogus'")
    unpack("${case}" value key)
    expect_error(2 "tessera-run: error: [^\n]*${key}" ${dec} "--set=model.lora=${value}" "--set=checkpoint.dir=${WORK_DIR}/bad")
  endforeach()
  expect_error(2 "tessera-run: error: [^\n]*model.lora needs model.sequence_parallel: false"
               ${dtiny} "--set=model.lora={rank: 2}" "--set=checkpoint.dir=${WORK_DIR}/bad")
  message(STATUS "lora: ${n} base tensors unchanged, ${n_adapters} adapters trained")

elseif(MODE STREQUAL "resume_safety")
  # resume: latest refuses to start over; latest_or_start starts from step 0 only in an
  # empty directory; a broken or escaping `latest` pointer is never followed; keep_last
  # never deletes steps newer than the one saved; unfinished saves are cleaned at start.
  set(np2 "--set=parallelism={data: none, domain: 2}")
  set(dir "${WORK_DIR}/ckpt")
  file(REMOVE_RECURSE "${dir}")
  expect_error(2 "resume: latest, but checkpoint.dir '[^']*' holds no checkpoint; use resume: latest_or_start"
               ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=resume=latest)
  expect_success(2 ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=resume=latest_or_start --set=schedule.steps=6)
  if(NOT last_output MATCHES "starting from step 0 \\(resume: latest_or_start\\)")
    message(FATAL_ERROR "latest_or_start in an empty directory did not start from step 0:\n${last_output}")
  endif()
  # A killed save left an unfinished step-3 directory: removed at the next start.
  file(MAKE_DIRECTORY "${dir}/.step_00000003.tmp-123-abc")
  file(WRITE "${dir}/.step_00000003.tmp-123-abc/checkpoint.h5" "half written")
  expect_success(2 ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=resume=latest_or_start --set=schedule.steps=6)
  if(NOT last_output MATCHES "removed 1 unfinished save" OR EXISTS "${dir}/.step_00000003.tmp-123-abc")
    message(FATAL_ERROR "the stale temporary directory was not removed at start:\n${last_output}")
  endif()
  # A run that starts over (no resume) in the same directory saves step 3 with
  # keep_last 1: the newer step 6 must survive.
  expect_success(2 ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=schedule.steps=3 --set=checkpoint.keep_last=1)
  if(NOT EXISTS "${dir}/step_00000006" OR NOT last_output MATCHES "keep_last rotation skipped")
    message(FATAL_ERROR "keep_last deleted a newer step than the one saved:\n${last_output}")
  endif()
  # A pointer outside the root, or to nothing, is an error, never followed.
  foreach(pointer "../../etc" "/tmp" "step_00000099")
    file(WRITE "${dir}/latest" "${pointer}\n")
    expect_error(2 "its 'latest' pointer (holds|names) '${pointer}'"
                 ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=resume=latest_or_start)
  endforeach()
  # Step directories but no pointer: the newest step cannot be identified safely.
  file(REMOVE "${dir}/latest")
  expect_error(2 "holds 2 step directories \\(the newest: [^)]*step_00000006\\) but no 'latest' pointer"
               ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=resume=latest_or_start)
  message(STATUS "resume safety: refusals, cleanup and rotation as expected")

elseif(MODE STREQUAL "disk_full")
  # A save that hits a full disk (a 16 KiB file-size limit, SIGXFSZ ignored, so writes
  # fail with EFBIG) fails cleanly on every rank: an error naming the file, exit 1 (no
  # crash, no hang), no unfinished directory, and the previous checkpoint and `latest`
  # intact and loadable. The limit covers every file the ranks write, and UCX's posix
  # shared-memory transport keeps its segments in files (MPI_Init fails under it):
  # UCX_TLS=^posix leaves UCX its SysV shared-memory and CMA transports, which the limit
  # does not touch. Not TCP (MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self): with MPICH
  # 4.0.2 and UCX 1.13 MPI_Finalize over TCP hangs when the ranks enter it milliseconds
  # apart (one rank's endpoint flush completes and it waits in the PMI barrier without
  # progressing, while the other's flush waits for that rank's acknowledgement forever).
  # A 2-rank MPI program whose ranks reach MPI_Finalize 20 ms apart hung so in 15 of 120
  # runs, this limited run in 16 of 150 under load; 0 of 300 with UCX_TLS=^posix.
  set(np2 "--set=parallelism={data: none, domain: 2}")
  foreach(layout per_rank shared)
    set(dir "${WORK_DIR}/${layout}")
    file(REMOVE_RECURSE "${dir}")
    expect_success(2 ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}" --set=checkpoint.layout=${layout}
                   --set=schedule.steps=3)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env UCX_TLS=^posix
                            bash -c "trap '' XFSZ; ulimit -f 16; exec \"\$@\"" limited
                            ${MPIEXEC} ${NUMPROC_FLAG} 2 ${RUN} ${tiny} ${data} ${np2} "--set=checkpoint.dir=${dir}"
                            --set=checkpoint.layout=${layout} --set=schedule.steps=6 --set=resume=latest
                    WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                    TIMEOUT 120)
    set(out "${out}${err}")
    if(NOT rc EQUAL 1 OR NOT out MATCHES "tessera-run: error: [^\n]*(File too large|file write failed)")
      message(FATAL_ERROR "${layout}: expected exit 1 and an error naming the failed write; got '${rc}':\n${out}")
    endif()
    file(READ "${dir}/latest" latest)
    string(STRIP "${latest}" latest)
    file(GLOB leftovers "${dir}/.step_*")
    if(NOT latest STREQUAL "step_00000003" OR EXISTS "${dir}/step_00000006" OR leftovers)
      message(FATAL_ERROR "${layout}: after the failed save latest is '${latest}', leftovers '${leftovers}'")
    endif()
    execute_process(COMMAND ${CKPT} verify "${dir}" OUTPUT_VARIABLE vout ERROR_VARIABLE verr RESULT_VARIABLE vrc)
    if(NOT vrc EQUAL 0)
      message(FATAL_ERROR "${layout}: the previous checkpoint no longer verifies:\n${vout}${verr}")
    endif()
    message(STATUS "disk full (${layout}): clean failure, step 3 intact")
  endforeach()

elseif(MODE STREQUAL "layouts")
  # The same training at (dp, tp, domain) = (1,1,1), (1,2,2), (2,2,1).
  set(common ${tiny} ${data} --set=checkpoint.interval=0)
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/l111" --set=parallelism.tensor=1 --set=parallelism.domain=1)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/l122")
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/l221" --set=parallelism.data=ddp --set=parallelism.domain=1)
  foreach(other l122 l221)
    # fp32 tolerance: weights are O(0.1..1) and 8 AdamW steps move each by at most ~lr.
    expect_close("${WORK_DIR}/l111" "${WORK_DIR}/${other}" 1e-5 "(1,1,1) and ${other}")
    message(STATUS "(1,1,1) vs ${other}: max abs difference ${last_difference}")
  endforeach()

elseif(MODE STREQUAL "bad_config")
  # Rejected before any training, naming the key, once (rank 0), non-zero on every rank.
  file(WRITE "${WORK_DIR}/tensor0.yaml" "parallelism:\n  data: none\n  tensor: 0\n")
  file(WRITE "${WORK_DIR}/unknown.yaml" "model: {width: 8}\ndata: {batchsize: 4}\n")
  file(WRITE "${WORK_DIR}/unknown_top.yaml" "schedule: {steps: 3}\noptimiser: {lr: 1.0}\n")
  # A key given twice is an error naming it and both lines, not "the last one wins".
  file(WRITE "${WORK_DIR}/duplicate.yaml" "optimizer:\n  lr: 1.0e-3\n  lr: 1.0\n")
  foreach(case "tensor0.yaml|parallelism.tensor" "unknown.yaml|data.batchsize" "unknown_top.yaml|optimiser"
               "duplicate.yaml|duplicate.yaml:3: optimizer.lr: the key appears twice \\(first at line 2\\)")
    unpack("${case}" file key)
    expect_refusal(2 "${key}" "${WORK_DIR}/${file}")
  endforeach()
  # Normalisation statistics that cannot normalise (std 0, NaN; mean infinite) are an
  # error naming the variable, not a silent std of 1.
  if(EXISTS /usr/bin/python3)
    foreach(case "std|0|0.0" "std|1|nan" "mean|2|inf")
      unpack("${case}" attr channel value)
      set(bad "${WORK_DIR}/bad_${attr}_${channel}.h5")
      file(COPY_FILE "${SOURCE_DIR}/data/rossby_haurwitz.h5" "${bad}")
      execute_process(COMMAND /usr/bin/python3 -c
                      "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); d=f['fields']; a=d.attrs['${attr}']; a[${channel}]=float('${value}'); d.attrs['${attr}']=a"
                      "${bad}" RESULT_VARIABLE py_rc ERROR_VARIABLE py_err)
      if(NOT py_rc EQUAL 0)
        message(STATUS "normalisation check skipped (h5py unavailable: ${py_err})")
        break()
      endif()
      set(variables h u v)  # the dataset's channels, in file order
      list(GET variables ${channel} variable)
      expect_error(2 "tessera-run: error: [^\n]*variable '${variable}'[^\n]*normalisation needs a finite mean and a finite std > 0"
                   ${tiny} "--set=data.path=${bad}" "--set=parallelism={data: none, domain: 2}")
    endforeach()
  endif()
  # A model that cannot fit in memory is refused before anything is allocated, on every
  # rank, also by --dry-run (it used to run out of memory building 10^8 blocks).
  expect_error(2 "tessera-run: error: [^\n]*the model has 28000000443 parameters[^\n]*more than this rank's share of the node's available memory"
               ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" --set=model.blocks=100000000 --dry-run)
  # An unwritable checkpoint.dir is found before training, not at the first save.
  expect_refusal(2 "checkpoint.dir '/proc/tessera-no-such-dir' is not writable"
                 ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" "--set=checkpoint.dir=/proc/tessera-no-such-dir")
  # An unknown key given with --set is rejected the same way.
  expect_refusal(2 "optimizer.learning_rate" ${tiny} --set=optimizer.learning_rate=1)

elseif(MODE STREQUAL "device")
  # device: an unknown value is rejected naming the key and the choices; auto on a
  # machine without a GPU trains on the host exactly as device: host; device: cuda
  # without a GPU fails before training, once, naming the key and the reason.
  expect_refusal(2 "device: unknown value 'gpu' \\(expected auto, host, cuda\\)"
                 ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" --set=device=gpu "--set=checkpoint.dir=${WORK_DIR}/x")
  expect_success(2 ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" --set=device=host "--set=checkpoint.dir=${WORK_DIR}/host")
  set(host_output "${last_output}")
  if(NOT host_output MATCHES "device host \\(device: host\\)")
    message(FATAL_ERROR "device: host: the mesh line does not name the device:\n${host_output}")
  endif()
  string(REGEX MATCH "final loss [0-9.e+-]+" host_loss "${host_output}")
  run_driver(out rc 2 ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" --set=device=cuda "--set=checkpoint.dir=${WORK_DIR}/cuda")
  if(out MATCHES "sees no GPU")
    if(rc EQUAL 0 OR out MATCHES "\nstep " OR EXISTS "${WORK_DIR}/cuda")
      message(FATAL_ERROR "device: cuda without a GPU must fail before training:\n${out}")
    endif()
    if(NOT out MATCHES "tessera-run: error: [^\n]*device: cuda, but this rank sees no GPU")
      message(FATAL_ERROR "device: cuda without a GPU: the error must name the key and why:\n${out}")
    endif()
    refused_once("${out}" "device: cuda")
    expect_success(2 ${tiny} ${data} "--set=parallelism={data: none, domain: 2}" --set=device=auto "--set=checkpoint.dir=${WORK_DIR}/auto")
    string(REGEX MATCH "final loss [0-9.e+-]+" auto_loss "${last_output}")
    if(NOT last_output MATCHES "device host \\(device: auto\\)" OR NOT auto_loss STREQUAL host_loss)
      message(FATAL_ERROR "device: auto without a GPU must train on the host like device: host (${host_loss}):\n${last_output}")
    endif()
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "device: cuda on a machine with a GPU failed (${rc}):\n${out}")
  endif()

elseif(MODE STREQUAL "device_cuda")
  # On a GPU: the field emulator and the decoder train on the device at 1 and 2 ranks (one
  # GPU shared: the collectives fall back to staged MPI) and their final losses equal the
  # host runs' to 1e-4 relative.
  run_driver(out rc 1 ${tiny} ${data} --set=device=cuda "--set=parallelism={data: none}" "--set=checkpoint.dir=")
  if(out MATCHES "sees no GPU")
    message("SKIPPED: no GPU: ${out}")
    return()
  endif()
  foreach(case "1|${tiny}|{data: none}" "2|${tiny}|{data: none, domain: 2}" "2|${dtiny}|{data: none, tensor: 2}"
               "2|${dtiny}|{data: ddp}")
    unpack("${case}" np config layout)
    # The decoder's tokens are synthetic: it refuses data.path (found on the first GPU run).
    set(case_data ${data})
    if(config STREQUAL dtiny OR config STREQUAL "${dtiny}")
      set(case_data "")
    endif()
    set(losses "")
    foreach(device host cuda)
      expect_success(${np} ${config} ${case_data} --set=device=${device} "--set=parallelism=${layout}" "--set=checkpoint.dir=")
      if(NOT last_output MATCHES "device ${device}")
        message(FATAL_ERROR "${config} device: ${device}: not trained on ${device}:\n${last_output}")
      endif()
      string(REGEX MATCH "final loss ([0-9.e+-]+)" loss "${last_output}")
      list(APPEND losses "${CMAKE_MATCH_1}")
    endforeach()
    list(GET losses 0 host_loss)
    list(GET losses 1 cuda_loss)
    expect_relatively_close(${host_loss} ${cuda_loss} 1e-4 "${config} at ${np} ranks (${layout}): final loss on cuda vs host")
    message(STATUS "${config} np ${np} ${layout}: final loss host ${host_loss}, cuda ${cuda_loss}")
  endforeach()

elseif(MODE STREQUAL "dry_run")
  expect_success(4 "${SOURCE_DIR}/data/configs/demo.yaml" --dry-run "--set=checkpoint.dir=${WORK_DIR}/none")
  if(NOT last_output MATCHES "mesh: 4 ranks = dp 1 x tp 2 x domain 2" OR
     NOT last_output MATCHES "per-rank memory plan" OR NOT last_output MATCHES "\n +3 +0 +1 +1 +\\[16, 32\\)")
    message(FATAL_ERROR "unexpected --dry-run output:\n${last_output}")
  endif()
  if(last_output MATCHES "\nstep " OR EXISTS "${WORK_DIR}/none")
    message(FATAL_ERROR "--dry-run trained or wrote a checkpoint:\n${last_output}")
  endif()
elseif(MODE STREQUAL "decoder_train")
  # data/configs/decoder_2rank.yaml (tp 2, sequence parallel) trains below the unigram
  # baseline it prints.
  expect_success(2 "${SOURCE_DIR}/data/configs/decoder_2rank.yaml" "--set=checkpoint.dir=${WORK_DIR}/dec")
  if(NOT last_output MATCHES "sequence parallel on" OR NOT last_output MATCHES "baselines \\(nats/token\\): uniform")
    message(FATAL_ERROR "expected sequence parallelism and the baselines line:\n${last_output}")
  endif()
  if(NOT last_output MATCHES "final loss ([0-9.e+-]+) unigram ([0-9.e+-]+) ratio ([0-9.]+) \\(below")
    message(FATAL_ERROR "the decoder did not end below the unigram baseline:\n${last_output}")
  endif()
  set(ratio "${CMAKE_MATCH_3}")
  if(NOT ratio LESS 0.8)
    message(FATAL_ERROR "the decoder's loss is only ${ratio} x the unigram baseline (expected < 0.8):\n${last_output}")
  endif()
  string(REGEX MATCHALL "\nstep +[0-9]+/[^\n]*tokens/s" lines "${last_output}")
  list(LENGTH lines n)
  if(NOT n EQUAL 6)
    message(FATAL_ERROR "expected 6 progress lines with tokens/s:\n${last_output}")
  endif()
  if(NOT EXISTS "${WORK_DIR}/dec/step_00000060/checkpoint.h5")
    message(FATAL_ERROR "no final checkpoint under ${WORK_DIR}/dec")
  endif()
  message(STATUS "decoder: loss ${ratio} x the unigram baseline")

elseif(MODE STREQUAL "decoder_layouts")
  # The same training at tp 1 (serial), tp 2 with sequence parallelism, ddp 2 x tp 2 and
  # fsdp2 2 x tp 2.
  set(common ${dtiny} --set=checkpoint.interval=0)
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/tp1" --set=parallelism.tensor=1)
  expect_success(2 ${common} "--set=checkpoint.dir=${WORK_DIR}/tp2")
  if(NOT last_output MATCHES "sequence parallel on")
    message(FATAL_ERROR "tp 2 did not run with sequence parallelism:\n${last_output}")
  endif()
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/ddp2tp2" --set=parallelism.data=ddp)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/fsdp2tp2" --set=parallelism.data=fsdp2)
  # Tied embeddings: replicated logits (the loss on a size-1 group), no sequence
  # parallelism; ddp and fsdp2 keep the declared tied table whole over dp.
  set(tied --set=model.tie_embeddings=true)
  expect_success(1 ${common} ${tied} "--set=checkpoint.dir=${WORK_DIR}/tied_tp1" --set=parallelism.tensor=1)
  expect_success(4 ${common} ${tied} "--set=checkpoint.dir=${WORK_DIR}/tied_ddp2tp2" --set=parallelism.data=ddp)
  expect_success(4 ${common} ${tied} "--set=checkpoint.dir=${WORK_DIR}/tied_fsdp2tp2" --set=parallelism.data=fsdp2)
  foreach(pair "tp1|tp2" "tp1|ddp2tp2" "tp1|fsdp2tp2" "tied_tp1|tied_ddp2tp2" "tied_tp1|tied_fsdp2tp2")
    unpack("${pair}" ref other)
    # fp32 tolerance: 8 AdamW steps of lr <= 1e-2 on O(1) weights.
    expect_close("${WORK_DIR}/${ref}" "${WORK_DIR}/${other}" 1e-5 "${ref} and ${other}")
    message(STATUS "decoder ${ref} vs ${other}: max abs difference ${last_difference}")
  endforeach()

elseif(MODE STREQUAL "decoder_resume")
  # tp 2 with sequence parallelism: uninterrupted (checkpoints at 3, 6, 8), killed after
  # step 5, resumed from step 3: bit-identical weights and optimizer state.
  expect_success(2 ${dtiny} "--set=checkpoint.dir=${WORK_DIR}/full")
  kill_and_resume(2 "${WORK_DIR}/full" "${WORK_DIR}/killed" ${dtiny})
  # A checkpoint of another architecture is refused, naming the differing key.
  expect_error(2 "tessera-run: error: resume: [^\n]*n_layers" ${dtiny} "--set=checkpoint.dir=${WORK_DIR}/killed"
               --set=resume=latest --set=schedule.steps=9 --set=model.n_layers=1)
  message(STATUS "decoder resume: bit-identical after kill at step 5 and resume from step 3")

elseif(MODE STREQUAL "decoder_bad_config")
  # Rejected before any training, naming the key, once (rank 0), non-zero on every rank.
  set(m "model: {type: decoder, vocab: 32, d_model: 16, n_heads: 2, hidden: 32")
  file(WRITE "${WORK_DIR}/width.yaml" "${m}, width: 8}\n")
  file(WRITE "${WORK_DIR}/seqlen.yaml" "${m}, seqlen: 8}\n")
  file(WRITE "${WORK_DIR}/variables.yaml" "data: {variables: [h]}\n${m}}\n")
  file(WRITE "${WORK_DIR}/heads.yaml" "parallelism: {tensor: 2}\nmodel: {type: decoder, n_heads: 3, d_model: 12}\n")
  file(WRITE "${WORK_DIR}/type.yaml" "model: {type: decodr}\n")
  foreach(case "width.yaml|model.width: unknown key 'width'" "seqlen.yaml|model.seqlen: unknown key"
               "variables.yaml|data.variables: unknown key" "heads.yaml|model.n_heads \\(3\\) must be divisible"
               "type.yaml|model.type: unknown value 'decodr'")
    unpack("${case}" file key)
    expect_refusal(2 "${key}" "${WORK_DIR}/${file}")
  endforeach()
  expect_refusal(2 "model.dmodel" ${dtiny} --set=model.dmodel=8)

elseif(MODE STREQUAL "decoder_dry_run")
  expect_success(2 ${dtiny} --dry-run "--set=checkpoint.dir=${WORK_DIR}/none")
  if(NOT last_output MATCHES "mesh: 2 ranks = dp 1 x tp 2 x domain 1" OR
     NOT last_output MATCHES "per-rank memory plan" OR NOT last_output MATCHES "\n +1 +0 +1 +0 +\\[8, 16\\)")
    message(FATAL_ERROR "unexpected --dry-run output:\n${last_output}")
  endif()
  if(last_output MATCHES "\nstep " OR EXISTS "${WORK_DIR}/none")
    message(FATAL_ERROR "--dry-run trained or wrote a checkpoint:\n${last_output}")
  endif()
  # Tied embeddings switch sequence parallelism off; rank 0 says why, once.
  expect_success(2 ${dtiny} --dry-run --set=model.tie_embeddings=true)
  string(REGEX MATCHALL "note: sequence parallelism is off: the embeddings are tied" notes "${last_output}")
  list(LENGTH notes n)
  if(NOT n EQUAL 1 OR NOT last_output MATCHES "sequence parallel off" OR NOT last_output MATCHES "\\[0, 16\\)")
    message(FATAL_ERROR "tied embeddings: expected one note with the reason and no sequence parallelism:\n${last_output}")
  endif()

elseif(MODE STREQUAL "decoder_pipeline")
  # parallelism.pipeline (docs/pipeline.md): the decoder trained at pipeline 2 (GPipe and
  # 1F1B, even split and a cut point), pipeline 2 x tp 2, pipeline 2 x ddp 2 and pipeline
  # 4, activations recomputed and blocks checkpointed, ends with the weights and AdamW
  # state of the same training without a pipeline, to fp32 rounding, and with its
  # validation loss (a tenth of the samples held out, evaluated through the stages; the
  # last validation batch, 2 sequences, is shorter than pipeline.microbatches); the dry
  # run's stage assignment; the keys' errors.
  set(common ${dtiny} --set=checkpoint.interval=0 --set=optimizer.clip_grad_norm=0 --set=parallelism.tensor=1
             --set=data.validation=0.1)
  # The last run's final validation loss, into val_<name>.
  macro(keep_validation_loss name)
    if(NOT last_output MATCHES "summary: final validation loss ([0-9.e+-]+)")
      message(FATAL_ERROR "${name}: no final validation loss:\n${last_output}")
    endif()
    set(val_${name} "${CMAKE_MATCH_1}")
  endmacro()
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp1")
  keep_validation_loss(pp1)
  expect_success(2 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2" --set=parallelism.pipeline=2
                 --set=pipeline.schedule=gpipe --set=pipeline.microbatches=4)
  if(NOT last_output MATCHES "pipeline: 2 stages, gpipe, 4 microbatches")
    message(FATAL_ERROR "pipeline 2 did not report its stages:\n${last_output}")
  endif()
  keep_validation_loss(pp2)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2tp2" --set=parallelism.pipeline=2
                 --set=parallelism.tensor=2 "--set=pipeline.cut_points=[layers.1]")
  keep_validation_loss(pp2tp2)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2ddp2" --set=parallelism.pipeline=2
                 --set=parallelism.data=ddp --set=pipeline.microbatches=2)
  keep_validation_loss(pp2ddp2)
  expect_success(4 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp4" --set=parallelism.pipeline=4
                 --set=pipeline.microbatches=8)
  keep_validation_loss(pp4)
  foreach(other pp2 pp2tp2 pp2ddp2 pp4)
    expect_relatively_close("${val_pp1}" "${val_${other}}" 1e-5 "the final validation loss of pp1 and ${other}")
    message(STATUS "decoder final validation loss: pp1 ${val_pp1}, ${other} ${val_${other}}")
  endforeach()
  # The stages' activations recomputed instead of stashed, and checkpointed blocks inside
  # the stages (the stash then holds a checkpointed block's input only): the same training.
  expect_success(2 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2recompute" --set=parallelism.pipeline=2
                 --set=pipeline.schedule=gpipe --set=pipeline.microbatches=4 --set=pipeline.activations=recompute)
  if(NOT last_output MATCHES "; activations: recompute")
    message(FATAL_ERROR "pipeline 2 did not report recompute:\n${last_output}")
  endif()
  expect_success(2 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2ckpt" --set=parallelism.pipeline=2
                 --set=pipeline.microbatches=4 --set=model.activation_checkpointing=blocks)
  # Clipping by the global norm: the stages hold disjoint parameters, and the norm's one
  # all-reduce over the world sums them (clip_grad_norm active: 0.5 < the first norms).
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp1clip" --set=optimizer.clip_grad_norm=0.5)
  expect_success(2 ${common} "--set=checkpoint.dir=${WORK_DIR}/pp2clip" --set=optimizer.clip_grad_norm=0.5
                 --set=parallelism.pipeline=2)
  expect_close("${WORK_DIR}/pp1clip" "${WORK_DIR}/pp2clip" 1e-5 "clipped pp1 and pp2")
  foreach(other pp2 pp2tp2 pp2ddp2 pp4 pp2recompute pp2ckpt)
    expect_close("${WORK_DIR}/pp1" "${WORK_DIR}/${other}" 1e-5 "pp1 and ${other}")
    message(STATUS "decoder pp1 vs ${other}: max abs difference ${last_difference}")
  endforeach()
  # Tied embeddings (pp/tied_parameters.hpp): the last stage's head reads a replica of
  # the first stage's table, refreshed every step, and adds its gradient share to the
  # table's. The same training as tied pipeline 1 at pipeline 2, 2 x ddp 2 (overlapped)
  # and 4, and the checkpoints hold the same tensors (the table once, no head).
  set(tied_common ${common} --set=model.tie_embeddings=true)
  expect_success(1 ${tied_common} "--set=checkpoint.dir=${WORK_DIR}/tied1")
  keep_validation_loss(tied1)
  expect_success(2 ${tied_common} "--set=checkpoint.dir=${WORK_DIR}/tied2" --set=parallelism.pipeline=2
                 --set=pipeline.microbatches=4)
  keep_validation_loss(tied2)
  expect_success(4 ${tied_common} "--set=checkpoint.dir=${WORK_DIR}/tied2ddp2" --set=parallelism.pipeline=2
                 --set=parallelism.data=ddp --set=pipeline.microbatches=2)
  expect_success(4 ${tied_common} "--set=checkpoint.dir=${WORK_DIR}/tied4" --set=parallelism.pipeline=4
                 "--set=pipeline.cut_points=[layers.0,layers.1,norm]")
  expect_relatively_close("${val_tied1}" "${val_tied2}" 1e-5 "the final validation loss of tied pp1 and pp2")
  foreach(other tied2 tied2ddp2 tied4)
    expect_close("${WORK_DIR}/tied1" "${WORK_DIR}/${other}" 1e-5 "tied pp1 and ${other}")
    message(STATUS "tied decoder pp1 vs ${other}: max abs difference ${last_difference}")
  endforeach()
  # The dry run: the stage assignment and each stage's memory; nothing trained.
  expect_success(4 ${common} --dry-run --set=parallelism.pipeline=2 --set=parallelism.tensor=2
                 "--set=pipeline.cut_points=[layers.1]" "--set=checkpoint.dir=${WORK_DIR}/none")
  if(NOT last_output MATCHES "units per stage: embed \\.\\. layers\\.0 \\(2\\) \\| layers\\.1 \\.\\. head \\(3\\)" OR
     NOT last_output MATCHES "stage 0: embed \\.\\. layers\\.0, 1824 parameter elements per rank" OR
     NOT last_output MATCHES "stage 1: layers\\.1 \\.\\. head, 1584 parameter elements per rank" OR
     NOT last_output MATCHES "activations 0\\.12 MiB \\(2 microbatches of 4 rows in flight, stash\\)" OR
     NOT last_output MATCHES "activations 0\\.07 MiB \\(1 microbatch of 4 rows in flight, stash\\)" OR
     last_output MATCHES "\nstep " OR EXISTS "${WORK_DIR}/none")
    message(FATAL_ERROR "unexpected pipeline --dry-run output:\n${last_output}")
  endif()
  # Tied embeddings: the last stage's replica of embed's table (4096 x 16 f32, 256 KiB)
  # and its gradient count in its memory, though they are not its parameters (16
  # elements: norm's weight). The plan used to leave them out.
  expect_success(2 ${common} --dry-run --set=parallelism.pipeline=2 --set=model.tie_embeddings=true
                 --set=model.vocab=4096 "--set=checkpoint.dir=${WORK_DIR}/none")
  if(NOT last_output MATCHES "stage 1: norm \\.\\. head, 16 parameter elements per rank, parameters 0\\.25 MiB \\+ gradients 0\\.25 MiB \\(with embed\\.weight's tied replica, 0\\.25 MiB \\+ 0\\.25 MiB\\)" OR
     NOT last_output MATCHES "\n +1 +0 +0 +0 +\\[0, 16\\) +256\\.06 KiB +256\\.06 KiB ")
    message(FATAL_ERROR "unexpected tied pipeline --dry-run output:\n${last_output}")
  endif()
  # init_weights from a checkpoint that lacks a parameter only stage 1 holds (head.weight,
  # left out by an import): every rank fails with stage 1's error; a stage failing alone
  # used to leave the other waiting in the first step (the run never ended).
  execute_process(COMMAND ${CKPT} export "${WORK_DIR}/pp1" "${WORK_DIR}/pp1.safetensors" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE o ERROR_VARIABLE e)
  file(WRITE "${WORK_DIR}/drop_head.yaml" "tensors: {}\npassthrough: true\nignore: [head.weight]\n")
  file(WRITE "${WORK_DIR}/meta.yaml" "model:\n  type: decoder\n  vocab: 32\n  d_model: 16\n  n_heads: 2\n  hidden: 32\n"
             "  n_layers: 2\n  eps: 1.0e-6\n  tie_embeddings: false\n")
  execute_process(COMMAND ${CKPT} import "${WORK_DIR}/pp1.safetensors" "${WORK_DIR}/headless" --mapping
                          "${WORK_DIR}/drop_head.yaml" --metadata "${WORK_DIR}/meta.yaml" --partial true
                  RESULT_VARIABLE rc2 OUTPUT_VARIABLE o2 ERROR_VARIABLE e2)
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
    message(FATAL_ERROR "export/import of a headless decoder failed:\n${o}${e}${o2}${e2}")
  endif()
  run_driver(out rc 2 ${common} --set=parallelism.pipeline=2 "--set=init_weights=${WORK_DIR}/headless"
             "--set=checkpoint.dir=${WORK_DIR}/none")
  string(REGEX MATCHALL "error: init_weights: [^\n]*lacks /model/head.weight \\(on rank 1 of 2\\)" lines "${out}")
  list(LENGTH lines n)
  # rank 0 prints the agreed error, which names rank 1 (stage 1) as where it happened
  if(rc EQUAL 0 OR NOT n EQUAL 1)
    message(FATAL_ERROR "init_weights without head.weight at pipeline 2: expected stage 1's error on every rank; "
                        "got ${rc}:\n${out}")
  endif()
  # Errors naming the key.
  expect_error(4 "pipeline.cut_points: with model.tie_embeddings the last stage would hold only the head"
               ${common} --dry-run --set=parallelism.pipeline=4 --set=model.tie_embeddings=true)
  foreach(bad "--set=pipeline.microbatches=9|pipeline.microbatches \\(9\\) exceeds the rows"
              "--set=pipeline.schedule=zigzag|pipeline.schedule"
              "--set=pipeline.activations=keep|pipeline.activations"
              "--set=pipeline.cut_points=[nope]|pipeline.cut_points: .*'nope'")
    unpack("${bad}" arg expected)
    expect_error(2 "${expected}" ${common} --dry-run --set=parallelism.pipeline=2 ${arg})
  endforeach()
  expect_error(1 "pipeline.microbatches and pipeline.cut_points need parallelism.pipeline > 1"
               ${common} --dry-run --set=pipeline.microbatches=2)

elseif(MODE STREQUAL "accumulate")
  # optimizer.accumulate N with data.batch_size B trains like batch N x B: the same
  # samples per step, gradients summed over the micro-batches and reduced over dp once.
  # Reference: batch 8 at (1,1,1); against it, within fp32 rounding (1e-5, as the layouts):
  # the field emulator at 1 rank (4 x 2, 2 x 4), ddp 2 (4 x 2), fsdp2 2 x domain 2 (4 x 2)
  # and ddp 2 x tp 2 (2 x 4); the decoder at tp 1 (4 x 2), fsdp2 2 x tp 2 (4 x 2) and
  # ddp 2 (2 x 4).
  set(common ${tiny} ${data} --set=checkpoint.interval=0)
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/ref" "--set=parallelism={data: none}" --set=data.batch_size=8)
  set(cases "1|{data: none}|4|2|f1_4x2" "1|{data: none}|2|4|f1_2x4" "2|{data: ddp}|4|2|ddp2_4x2"
            "4|{data: fsdp2, domain: 2}|4|2|fsdp2dom2_4x2" "4|{data: ddp, tensor: 2}|2|4|ddp2tp2_2x4")
  foreach(case IN LISTS cases)
    unpack("${case}" np layout batch n name)
    expect_success(${np} ${common} "--set=checkpoint.dir=${WORK_DIR}/${name}" "--set=parallelism=${layout}"
                   --set=data.batch_size=${batch} --set=optimizer.accumulate=${n})
    if(NOT last_output MATCHES "${n} micro-batches of ${batch} per step \\(8 samples\\)")
      message(FATAL_ERROR "${name}: the run does not announce ${n} micro-batches of ${batch}:\n${last_output}")
    endif()
    expect_close("${WORK_DIR}/ref" "${WORK_DIR}/${name}" 1e-5 "batch 8 and ${name} (batch ${batch} x accumulate ${n}, ${layout})")
    message(STATUS "field emulator batch 8 vs ${name}: max abs difference ${last_difference}")
  endforeach()
  set(common ${dtiny} --set=checkpoint.interval=0)
  expect_success(1 ${common} "--set=checkpoint.dir=${WORK_DIR}/dref" "--set=parallelism={data: none}")
  set(cases "1|{data: none}|4|2|d1_4x2" "4|{data: fsdp2, tensor: 2}|4|2|dfsdp2tp2_4x2" "2|{data: ddp}|2|4|dddp2_2x4")
  foreach(case IN LISTS cases)
    unpack("${case}" np layout batch n name)
    expect_success(${np} ${common} "--set=checkpoint.dir=${WORK_DIR}/${name}" "--set=parallelism=${layout}"
                   --set=data.batch_size=${batch} --set=optimizer.accumulate=${n})
    expect_close("${WORK_DIR}/dref" "${WORK_DIR}/${name}" 1e-5 "decoder batch 8 and ${name} (batch ${batch} x accumulate ${n}, ${layout})")
    message(STATUS "decoder batch 8 vs ${name}: max abs difference ${last_difference}")
  endforeach()
  # AdamW hardly sees the scale of the gradient; SGD moves with it, so these pairs would
  # catch a step that summed the micro-batch gradients instead of averaging them.
  set(sgd --set=optimizer.type=sgd --set=optimizer.lr=0.05 --set=checkpoint.interval=0)
  foreach(case "1|4|${tiny}|{data: none}|{data: fsdp2, domain: 2}|4|2|fields"
               "1|2|${dtiny}|{data: none}|{data: ddp}|2|4|tokens")
    unpack("${case}" np_ref np config ref_layout layout batch n name)
    set(path "")
    if(name STREQUAL "fields")
      set(path "${data}")
    endif()
    expect_success(${np_ref} ${config} ${path} ${sgd} "--set=checkpoint.dir=${WORK_DIR}/sgd_ref_${name}"
                   "--set=parallelism=${ref_layout}" --set=data.batch_size=8)
    expect_success(${np} ${config} ${path} ${sgd} "--set=checkpoint.dir=${WORK_DIR}/sgd_${name}"
                   "--set=parallelism=${layout}" --set=data.batch_size=${batch} --set=optimizer.accumulate=${n})
    expect_close("${WORK_DIR}/sgd_ref_${name}" "${WORK_DIR}/sgd_${name}" 1e-5
                 "SGD ${name}: batch 8 and batch ${batch} x accumulate ${n} (${layout})")
    message(STATUS "SGD ${name}: batch 8 vs ${batch} x ${n} at ${layout}: max abs difference ${last_difference}")
  endforeach()

elseif(MODE STREQUAL "metrics")
  # data.validation, schedule.eval_every and logging.metrics_file: the validation line
  # every eval_every steps and at the last; every progress line with its ETA; the metrics
  # file's records and their keys; a resumed run appends; scripts/plot-metrics makes a PNG.

  # expect_records(<file> <type> <steps> <keys>): the records of <type> are at exactly
  # <steps> (a list) and each has every key of <keys> with a value that is not null.
  function(expect_records file type steps keys)
    file(STRINGS "${file}" lines)
    set(seen "")
    foreach(line IN LISTS lines)
      string(JSON t ERROR_VARIABLE err GET "${line}" type)
      if(err)
        message(FATAL_ERROR "${file}: not a JSON record: ${line} (${err})")
      endif()
      if(NOT t STREQUAL type)
        continue()
      endif()
      foreach(key IN LISTS keys)
        string(JSON v ERROR_VARIABLE err GET "${line}" ${key})
        string(JSON kind ERROR_VARIABLE err2 TYPE "${line}" ${key})
        if(err OR kind STREQUAL "NULL")
          message(FATAL_ERROR "${file}: a ${type} record without '${key}': ${line}")
        endif()
      endforeach()
      if(NOT steps STREQUAL "-")
        string(JSON step GET "${line}" step)
        list(APPEND seen ${step})
      endif()
    endforeach()
    if(NOT steps STREQUAL "-" AND NOT seen STREQUAL steps)
      message(FATAL_ERROR "${file}: ${type} records at steps '${seen}', expected '${steps}'")
    endif()
  endfunction()

  set(train_keys step loss baseline lr grad_norm step_time_s samples_per_s eta_s epoch)
  set(np2 "--set=parallelism={data: none, domain: 2}")
  # The field emulator, the last quarter of the 121 times held out (30 frames: 29 samples
  # t -> t+1 from t = 91; training on t < 90), validation every 3 steps.
  expect_success(2 ${tiny} ${data} ${np2} "--set=checkpoint.dir=" --set=data.validation=0.25
                 --set=schedule.eval_every=3 "--set=logging.metrics_file=${WORK_DIR}/fields.jsonl")
  string(REGEX MATCHALL "\nvalidation step +[0-9]+/8  val_loss [0-9.e+-]+  persistence [0-9.e+-]+ +\\(29 samples" vals "${last_output}")
  list(LENGTH vals n)
  if(NOT n EQUAL 3 OR NOT last_output MATCHES "validation: 29 samples held out \\(t >= 91"
     OR NOT last_output MATCHES "summary: final validation loss")
    message(FATAL_ERROR "expected 29 held-out samples evaluated at steps 3, 6, 8:\n${last_output}")
  endif()
  string(REGEX MATCHALL "\nstep +[0-9]+/8  loss [^\n]* lr [^\n]* grad_norm [^\n]* step [0-9.]+ ms  [0-9.]+ samples/s  [0-9.e+-]+ grid points/s  eta [0-9hms.]+" lines "${last_output}")
  list(LENGTH lines n)
  if(NOT n EQUAL 2)
    message(FATAL_ERROR "expected 2 progress lines with loss, lr, grad_norm, step time, throughput and eta:\n${last_output}")
  endif()
  expect_records("${WORK_DIR}/fields.jsonl" run - "model;steps;batch_size;accumulate;train_samples;validation_samples")
  expect_records("${WORK_DIR}/fields.jsonl" train "4;8" "${train_keys};grid_points_per_s")
  expect_records("${WORK_DIR}/fields.jsonl" validation "3;6;8" "val_loss;baseline;samples")
  expect_records("${WORK_DIR}/fields.jsonl" summary - "final_loss;final_val_loss")

  # A validation file (the training file itself here: all its 120 samples), at ddp 2.
  expect_success(2 ${tiny} ${data} "--set=parallelism={data: ddp}" "--set=checkpoint.dir="
                 "--set=data.validation=${SOURCE_DIR}/data/rossby_haurwitz.h5" --set=schedule.eval_every=4)
  if(NOT last_output MATCHES "validation: 120 samples of [^\n]*rossby_haurwitz.h5"
     OR NOT last_output MATCHES "\nvalidation step +4/8  val_loss [^\n]*\\(120 samples")
    message(FATAL_ERROR "data.validation as a file: expected 120 validation samples at step 4:\n${last_output}")
  endif()

  # The decoder: a tenth of the samples held out, every 4 steps, tokens/s in the records.
  expect_success(2 ${dtiny} "--set=checkpoint.dir=" --set=data.validation=0.1 --set=schedule.eval_every=4
                 --set=optimizer.accumulate=2 "--set=logging.metrics_file=${WORK_DIR}/decoder.jsonl")
  if(NOT last_output MATCHES "\nvalidation step +4/8  val_loss [0-9.e+-]+  unigram ")
    message(FATAL_ERROR "the decoder's validation line is missing:\n${last_output}")
  endif()
  expect_records("${WORK_DIR}/decoder.jsonl" train "4;8" "${train_keys};tokens_per_s")
  expect_records("${WORK_DIR}/decoder.jsonl" validation "4;8" "val_loss;samples")
  expect_records("${WORK_DIR}/decoder.jsonl" run - "accumulate;samples_per_step")

  # The validation loss does not depend on the layout: 28 held-out samples (an even count,
  # so dp 2 evaluates them all) at (1,1,1) and at fsdp2 2 x domain 2; the decoder's 26 at
  # tp 1 and at fsdp2 2 x tp 2.
  foreach(case "1|${tiny}|{data: none}|0.24|fields" "4|${tiny}|{data: fsdp2, domain: 2}|0.24|fields"
               "1|${dtiny}|{data: none}|0.1|tokens" "4|${dtiny}|{data: fsdp2, tensor: 2}|0.1|tokens")
    unpack("${case}" np config layout fraction kind)
    set(path "")
    if(kind STREQUAL "fields")
      set(path "${data}")
    endif()
    expect_success(${np} ${config} ${path} "--set=parallelism=${layout}" "--set=checkpoint.dir="
                   --set=data.validation=${fraction})
    if(NOT last_output MATCHES "summary: final validation loss ([0-9.e+-]+)")
      message(FATAL_ERROR "${kind} at ${layout}: no final validation loss:\n${last_output}")
    endif()
    if(np EQUAL 1)
      set(reference "${CMAKE_MATCH_1}")
    else()
      expect_relatively_close(${reference} ${CMAKE_MATCH_1} 1e-5 "${kind}: final validation loss at ${layout} vs 1 rank")
      message(STATUS "${kind}: final validation loss ${reference} at 1 rank, ${CMAKE_MATCH_1} at ${layout}")
    endif()
  endforeach()

  # The decoder on bytes, validated on the bytes of a second file.
  expect_success(2 ${dtiny} "--set=checkpoint.dir=" --set=model.vocab=256 --set=data.source=bytes
                 "--set=data.path=${SOURCE_DIR}/docs/driver.md" "--set=data.validation=${SOURCE_DIR}/docs/domain.md")
  if(NOT last_output MATCHES "validation: [0-9]+ samples of bytes of [^\n]*docs/domain.md"
     OR NOT last_output MATCHES "\nvalidation step +8/8  val_loss ")
    message(FATAL_ERROR "the decoder with a validation file: expected its samples evaluated at step 8:\n${last_output}")
  endif()

  # Killed after step 5 and resumed from step 3: the second run appends its records.
  set(killed ${tiny} ${data} ${np2} "--set=checkpoint.dir=${WORK_DIR}/ckpt" --set=data.validation=0.25
             --set=schedule.eval_every=2 "--set=logging.metrics_file=${WORK_DIR}/resumed.jsonl")
  run_driver(out rc 2 ${killed} --kill-after-step 5)
  expect_success(2 ${killed} --set=resume=latest)
  expect_records("${WORK_DIR}/resumed.jsonl" validation "2;4;4;6;8" "val_loss")
  expect_records("${WORK_DIR}/resumed.jsonl" run - "start_step")

  # The PNG, with the plain renderer and with whatever this machine has.
  foreach(how "--plain" "")
    file(REMOVE "${WORK_DIR}/loss.png")
    execute_process(COMMAND /usr/bin/python3 "${SOURCE_DIR}/scripts/plot-metrics" "${WORK_DIR}/resumed.jsonl"
                            -o "${WORK_DIR}/loss.png" ${how}
                    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT EXISTS "${WORK_DIR}/loss.png")
      message(FATAL_ERROR "plot-metrics ${how} failed (${rc}):\n${out}${err}")
    endif()
    file(READ "${WORK_DIR}/loss.png" magic LIMIT 8 HEX)
    if(NOT magic STREQUAL "89504e470d0a1a0a" OR NOT out MATCHES "wrote [^\n]*loss.png \\(2 training and 4 validation points")
      message(FATAL_ERROR "plot-metrics ${how}: not a PNG of 2 training and 4 validation points ('${magic}'):\n${out}${err}")
    endif()
    message(STATUS "plot-metrics ${how}: ${out}")
  endforeach()

elseif(MODE STREQUAL "features_bad_config")
  # The keys of accumulation, validation and metrics: a bad value is refused before
  # training, naming the key, once (rank 0). Several --set of one case are joined by '&'.
  set(np2 "--set=parallelism={data: none, domain: 2}")
  foreach(case "fields|--set=optimizer.accumulate=0|optimizer.accumulate must be an integer >= 1, got 0"
               "fields|--set=schedule.eval_every=2|schedule.eval_every \\(2\\) needs validation data"
               "fields|--set=data.validation=1.5|data.validation must be a fraction in \\(0, 1\\)"
               "fields|--set=data.validation=0.999|data.validation \\(0.999\\) holds out 121 of the 121 times"
               "fields|--set=data.validation=no/such/file.h5|data.validation: cannot read 'no/such/file.h5'"
               "tokens|--set=data.validation=corpus.txt|data.validation names a file \\('corpus.txt'\\), whose bytes are tokens only with data.source bytes"
               "fields|--set=logging.metrics=x.jsonl|logging.metrics: unknown key 'metrics'"
               "fields|--set=logging.metrics_file=/proc/no/such/dir/m.jsonl|logging.metrics_file: cannot open '/proc/no/such/dir/m.jsonl'"
               "fields|--set=data.batch_size=64&--set=optimizer.accumulate=4|data.batch_size 64 x optimizer.accumulate 4 leaves no full step per epoch")
    unpack("${case}" config set expect)  # config fields: tiny.yaml at domain 2; tokens: decoder_tiny.yaml
    string(REPLACE "&" ";" set "${set}")
    if(config STREQUAL "tokens")
      expect_refusal(2 "${expect}" ${dtiny} ${set} "--set=checkpoint.dir=")
    else()
      expect_refusal(2 "${expect}" ${tiny} ${data} ${np2} ${set} "--set=checkpoint.dir=")
    endif()
  endforeach()

elseif(MODE STREQUAL "hostile_inputs")
  # Issue 46: what an attacker's inputs did to the tools, each now one error line before
  # training (or a non-zero status naming the file), never a hang, a crash or rc 0.
  set(np2 "--set=parallelism={data: none, domain: 2}")
  set(fifo "${WORK_DIR}/fifo")
  file(MAKE_DIRECTORY "${WORK_DIR}/dir.yaml")
  execute_process(COMMAND mkfifo "${fifo}" RESULT_VARIABLE fifo_rc)
  # Non-regular files as the config and as data.path: refused before a byte is read (a
  # device was read until memory ran out, a FIFO blocked, a directory was an empty config).
  foreach(case "/dev/zero|a character device" "${WORK_DIR}/dir.yaml|a directory" "${fifo}|a FIFO")
    unpack("${case}" path kind)
    expect_refusal(2 "config file '${path}' is ${kind}, not a regular file" "${path}" --dry-run)
    expect_refusal(2 "data file \\(data.path\\) '${path}' is ${kind}" ${tiny} ${np2} "--set=data.path=${path}" --dry-run)
  endforeach()
  # A FIFO as a checkpoint to start from (init_weights, resume, predict.checkpoint) or as
  # the metrics file: named, never waited on (a FIFO blocked the open until a peer came).
  foreach(key init_weights resume)
    expect_refusal(2 "checkpoint: the path '${fifo}' is a FIFO, not a regular file"
                   ${tiny} ${data} ${np2} "--set=${key}=${fifo}" "--set=checkpoint.dir=${WORK_DIR}/fifo_${key}")
  endforeach()
  expect_error(2 "tessera-run: error: [^\n]*checkpoint: the path '${fifo}' is a FIFO, not a regular file" predict
               ${tiny} ${data} ${np2} "--set=predict.checkpoint=${fifo}" "--set=predict.output=${WORK_DIR}/fifo.nc")
  expect_refusal(2 "logging.metrics_file '${fifo}' is a FIFO that no process reads: writing to it would block the run"
                 ${tiny} ${data} ${np2} "--set=logging.metrics_file=${fifo}" "--set=checkpoint.dir=")
  expect_refusal(2 "data file \\(data.path\\) '/dev/zero' is a character device"
                 ${dtiny} --set=model.vocab=256 "--set=data={source: bytes, path: /dev/zero, batch_size: 8}" --dry-run)
  # Size bombs, every model type: refused by the memory check before anything is
  # allocated, also by --dry-run (the decoder's grew to 7 GB, or ended in std::bad_alloc).
  foreach(set "model.n_layers=2147483648" "model.n_layers=10000000" "model.vocab=2147483648"
              "model.vocab=200000000" "model.d_model=1048576")
    expect_refusal(2 "the decoder has [0-9]+ parameters[^\n]*more than this rank's share|the decoder's parameter count does not fit"
                   ${dtiny} "--set=${set}" --dry-run)
  endforeach()
  foreach(set "model.width=1000000000" "model.mlp_hidden=4000000000")
    expect_refusal(2 "the model has [0-9]+ parameters[^\n]*more than this rank's share" ${tiny} ${data} ${np2} "--set=${set}" --dry-run)
  endforeach()
  # Activation bombs: parameters that fit, but a width, sequence or batch whose
  # activations do not (the field emulator's 246 GiB at model.width=1000000 passed
  # --dry-run). The whole memory plan is checked, the same with --dry-run as without,
  # naming the activations; a synthetic data.tokens beyond memory is named before it is
  # allocated.
  foreach(dry "--dry-run" "--set=checkpoint.dir=")
    expect_refusal(2 "the model: this rank's memory plan needs [0-9.]+ (GiB|TiB) \\(activations of one step [0-9.]+ (GiB|TiB) \\(an estimate\\)[^\n]*more than this rank's share[^\n]*lower data.batch_size, model.width"
                   ${tiny} ${data} ${np2} "--set=model.width=1000000" ${dry})
    expect_refusal(2 "the decoder: this rank's memory plan needs [0-9.]+ TiB \\(activations of one step [0-9.]+ TiB[^\n]*lower data.batch_size, model.seq_len"
                   ${dtiny} "--set=model.seq_len=1000000" "--set=data.tokens=20000000" ${dry})
  endforeach()
  expect_refusal(2 "data.tokens \\(1099511627776 synthetic tokens\\) needs 4.00 TiB in memory, more than the node has available \\([^\n]*\\): lower data.tokens"
                 ${dtiny} "--set=data.tokens=1099511627776" --dry-run)
  # A channel named twice is refused at config time, naming the key.
  expect_refusal(2 "data.variables\\[1\\]: 'h' is given twice \\(also as data.variables\\[0\\]\\)"
                 ${tiny} ${data} ${np2} "--set=data.variables=[h, h, v]" --dry-run)
  # Metrics that cannot be written fail the run (before training), naming the file.
  expect_refusal(2 "logging.metrics_file: writing to '/dev/full' failed \\(No space left on device\\)"
                 ${tiny} ${data} ${np2} --set=logging.metrics_file=/dev/full "--set=checkpoint.dir=")
  # Weights that are not finite (SGD at lr 1e30 without clipping saves NaN weights at
  # step 2, before the divergence check of the logged step 3): predict refuses the NaN
  # forecast and leaves no .tmp; resume and init_weights name the parameter.
  set(one "--set=parallelism={data: none, tensor: 1, domain: 1}")
  set(blown "${WORK_DIR}/blown/step_00000002")
  run_driver(out rc 1 ${tiny} ${data} ${one} "--set=optimizer={type: sgd, lr: 1.0e30, clip_grad_norm: 0}"
             --set=schedule.steps=3 --set=schedule.log_every=100 --set=checkpoint.interval=1
             "--set=checkpoint.dir=${WORK_DIR}/blown")
  if(NOT EXISTS "${blown}")
    message(FATAL_ERROR "the lr 1e30 run saved no step 2 (${rc}):\n${out}")
  endif()
  # tessera-ckpt verify fails the blown step (its checksums are good), naming each
  # dataset that holds NaN or Inf, how many values and the first one's index.
  execute_process(COMMAND ${CKPT} verify "${blown}" OUTPUT_VARIABLE vout ERROR_VARIABLE verr RESULT_VARIABLE vrc)
  if(NOT vrc EQUAL 1 OR NOT vout MATCHES "(^|\n)FAIL  dataset /model/encoder.weight: [1-9][0-9]* of [0-9]+ values are not finite, the first \\(NaN\\) at index \\[[0-9]+(, [0-9]+)*\\]"
     OR vout MATCHES "ok    /model/encoder.weight\n" OR NOT vout MATCHES "\nverify: [0-9]+ problem\\(s\\)\n")
    message(FATAL_ERROR "tessera-ckpt verify of NaN weights: expected exit 1 naming /model/encoder.weight; got ${vrc}:\n${vout}${verr}")
  endif()
  expect_error(1 "tessera-run: error: predict: step 1 of the forecast holds NaN \\(variable 'h'\\)" predict ${tiny}
               ${data} ${one} "--set=predict.checkpoint=${blown}" --set=predict.steps=2
               "--set=predict.output=${WORK_DIR}/p.nc")
  if(EXISTS "${WORK_DIR}/p.nc" OR EXISTS "${WORK_DIR}/p.nc.tmp")
    message(FATAL_ERROR "a refused predict left its output behind")
  endif()
  expect_refusal(1 "init_weights: parameter 'encoder.weight' of '${blown}/checkpoint.h5' holds NaN" ${tiny} ${data}
                 ${one} "--set=init_weights=${blown}" "--set=checkpoint.dir=${WORK_DIR}/again")
  # predict on a full disk (a 16 KiB file-size limit, as driver_disk_full): one error
  # naming the output, exit 1, no crash in MPI_Finalize and no .tmp left behind.
  expect_success(1 ${tiny} ${data} ${one} --set=schedule.steps=2 "--set=checkpoint.dir=${WORK_DIR}/ok")
  execute_process(COMMAND ${CMAKE_COMMAND} -E env UCX_TLS=^posix
                          bash -c "trap '' XFSZ; ulimit -f 16; exec \"\$@\"" limited
                          ${MPIEXEC} ${NUMPROC_FLAG} 2 ${RUN} predict ${tiny} ${data} ${np2}
                          "--set=predict.checkpoint=${WORK_DIR}/ok" "--set=predict.output=${WORK_DIR}/full.nc"
                  WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc
                  TIMEOUT 120)
  if(NOT rc EQUAL 1 OR NOT "${out}${err}" MATCHES "tessera-run: error: predict.output '[^\n]*full.nc': the forecast needs [0-9]+ bytes"
     OR EXISTS "${WORK_DIR}/full.nc" OR EXISTS "${WORK_DIR}/full.nc.tmp")
    message(FATAL_ERROR "predict on a full disk: expected exit 1, the error and no output; got ${rc}:\n${out}${err}")
  endif()
  # NaN in the data, and a declared time axis larger than memory (h5py writes both).
  if(EXISTS /usr/bin/python3)
    set(nan "${WORK_DIR}/nan.h5")
    set(huge "${WORK_DIR}/huge.h5")
    set(nan_nc "${WORK_DIR}/nan.nc")
    file(COPY_FILE "${SOURCE_DIR}/data/rossby_haurwitz.h5" "${nan}")
    file(COPY_FILE "${SOURCE_DIR}/data/rossby_haurwitz.nc" "${nan_nc}")
    execute_process(COMMAND /usr/bin/python3 -c [=[
import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    f['fields'][5, 1, 20, 7] = float('nan')
with h5py.File(sys.argv[4], 'r+') as f:
    f['h'][3, 4, 5] = float('nan')
with h5py.File(sys.argv[2], 'r') as src, h5py.File(sys.argv[3], 'w') as f:
    d = f.create_dataset('fields', shape=(2**40, 3, 32, 64), dtype='f4', chunks=(1, 1, 32, 64))
    for k, v in src['fields'].attrs.items():
        d.attrs[k] = v
]=] "${nan}" "${SOURCE_DIR}/data/rossby_haurwitz.h5" "${huge}" "${nan_nc}" RESULT_VARIABLE py_rc ERROR_VARIABLE py_err)
    if(py_rc EQUAL 0)
      expect_refusal(2 "data file '${nan}', dataset 'fields', variable 'u' holds NaN at time 5, latitude row 20, longitude 7"
                     ${tiny} ${np2} "--set=data.path=${nan}" "--set=checkpoint.dir=")
      expect_refusal(2 "netCDF file '${nan_nc}', variable 'h': NaN at time index 3 that no _FillValue"
                     ${tiny} ${np2} "--set=data.path=${nan_nc}" --set=data.normalize=false "--set=checkpoint.dir=")
      expect_refusal(2 "data '${huge}': this rank's band of 1099511627776 times[^\n]* needs [^\n]*more than the node has available"
                     ${tiny} ${np2} "--set=data.path=${huge}" "--set=checkpoint.dir=")
    else()
      message(STATUS "NaN and huge-axis data checks skipped (h5py unavailable: ${py_err})")
    endif()
  endif()

elseif(MODE STREQUAL "examples")
  # The worked example configs of docs/driver.md run, and the document shows each whole.
  foreach(case "2|accumulate.yaml|4 micro-batches of 8 per step \\(32 samples\\)"
               "2|validation.yaml|\nvalidation step +30/30  val_loss")
    unpack("${case}" np name expect)
    set(config "${SOURCE_DIR}/examples/configs/${name}")
    expect_shown_whole("${SOURCE_DIR}/docs/driver.md" "${config}")
    expect_success(${np} "${config}" "--set=checkpoint.dir=" "--set=logging.metrics_file=${WORK_DIR}/${name}.jsonl")
    if(NOT last_output MATCHES "${expect}" OR NOT last_output MATCHES "final loss [^\n]*\\(below")
      message(FATAL_ERROR "examples/configs/${name}: expected '${expect}' and a final loss below the baseline:\n${last_output}")
    endif()
    message(STATUS "examples/configs/${name}: ok")
  endforeach()

elseif(MODE STREQUAL "async")
  # checkpoint.async (issue 45), both layouts at 2 ranks: the run reports each snapshot,
  # each background commit and each wait; its checkpoints hold what the synchronous run's
  # hold (tessera-ckpt diff: identical; the C++ test test_checkpoint_async compares the
  # files byte for byte: here the metadata names the --set options, which differ); a
  # SIGKILL of every rank during the background write of step 6 leaves `latest` at step 3
  # and the unfinished directory behind (removed at the next start), and the run resumed
  # from step 3 ends identical to the uninterrupted run; a SIGKILL after step 7 leaves
  # `latest` at a complete step (3 or 6, whichever background write had finished), and
  # resuming from it also ends identical.
  set(np2 "--set=parallelism={data: none, domain: 2}")
  set(async --set=checkpoint.async=true)
  foreach(layout per_rank shared)
    set(common ${tiny} ${data} ${np2} --set=checkpoint.layout=${layout})
    set(sync_dir "${WORK_DIR}/sync_${layout}")
    set(async_dir "${WORK_DIR}/async_${layout}")
    expect_success(2 ${common} "--set=checkpoint.dir=${sync_dir}")
    expect_success(2 ${common} "--set=checkpoint.dir=${async_dir}" ${async})
    foreach(pattern "checkpoint: [^\n]*step_00000003 \\(${layout}\\): snapshot of [0-9.]+ MiB in [0-9.]+ ms; writing in the background"
                    "checkpoint: [^\n]*step_00000003 committed \\(written in the background in [0-9.]+ ms\\)"
                    "checkpoint: waited [0-9.]+ ms for the background save of [^\n]*step_00000008"
                    "summary: last checkpoint [^\n]*step_00000008")
      if(NOT last_output MATCHES "${pattern}")
        message(FATAL_ERROR "${layout}: the async run's output lacks '${pattern}':\n${last_output}")
      endif()
    endforeach()
    foreach(step 00000006 00000008)
      expect_identical("${sync_dir}/step_${step}" "${async_dir}/step_${step}" "${layout}: step ${step} sync and async")
      execute_process(COMMAND ${CKPT} verify "${async_dir}/step_${step}" RESULT_VARIABLE vrc OUTPUT_VARIABLE vout)
      if(NOT vrc EQUAL 0)
        message(FATAL_ERROR "${layout}: the async step ${step} does not verify:\n${vout}")
      endif()
    endforeach()

    # SIGKILL during the background write of step 6.
    set(killed "${WORK_DIR}/killed_${layout}")
    run_driver(out rc 2 ${common} "--set=checkpoint.dir=${killed}" ${async} --kill-during-save 6)
    if(rc EQUAL 0 OR NOT out MATCHES "kill-during-save 6: killing every rank during this save")
      message(FATAL_ERROR "${layout}: the run killed during the background save exited ${rc}:\n${out}")
    endif()
    file(READ "${killed}/latest" latest)
    string(STRIP "${latest}" latest)
    file(GLOB unfinished "${killed}/.step_00000006.tmp-*")
    if(NOT latest STREQUAL "step_00000003" OR EXISTS "${killed}/step_00000006" OR NOT unfinished)
      message(FATAL_ERROR "${layout}: after the kill latest is '${latest}' (expected step_00000003), "
                          "step 6 committed: ${unfinished}")
    endif()
    expect_success(2 ${common} "--set=checkpoint.dir=${killed}" ${async} --set=resume=latest)
    if(NOT last_output MATCHES "resumed from [^\n]*step_00000003[^\n]* at step 3")
      message(FATAL_ERROR "${layout}: not resumed at step 3:\n${last_output}")
    endif()
    file(GLOB unfinished "${killed}/.step_*")
    if(unfinished)
      message(FATAL_ERROR "${layout}: the unfinished save was not removed at the next start: ${unfinished}")
    endif()
    expect_identical("${sync_dir}" "${killed}" "${layout}: resumed after a kill during the background write")

    # SIGKILL after step 7: whichever background write had finished is `latest`.
    set(late "${WORK_DIR}/late_${layout}")
    run_driver(out rc 2 ${common} "--set=checkpoint.dir=${late}" ${async} --kill-after-step 7)
    if(rc EQUAL 0)
      message(FATAL_ERROR "${layout}: the run killed after step 7 exited 0:\n${out}")
    endif()
    file(READ "${late}/latest" latest)
    string(STRIP "${latest}" latest)
    if(NOT latest MATCHES "^step_0000000[36]$")
      message(FATAL_ERROR "${layout}: after the kill after step 7 latest is '${latest}'")
    endif()
    execute_process(COMMAND ${CKPT} verify "${late}/${latest}" RESULT_VARIABLE vrc OUTPUT_VARIABLE vout)
    if(NOT vrc EQUAL 0)
      message(FATAL_ERROR "${layout}: ${latest} after the kill does not verify:\n${vout}")
    endif()
    expect_success(2 ${common} "--set=checkpoint.dir=${late}" ${async} --set=resume=latest)
    expect_identical("${sync_dir}" "${late}" "${layout}: resumed from ${latest} after a kill after step 7")
    message(STATUS "async (${layout}): same checkpoints as sync; kill during the write keeps step 3; "
                   "kill after step 7 left ${latest}; resumed runs identical")
  endforeach()

else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
