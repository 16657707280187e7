# Runs the regional model (examples/fortran/regional_model.f90) at 1, 2 and 4 ranks and
# restarts it at other counts, and checks what it prints and writes.
#
#   cmake -DMPIEXEC=... -DNUMPROC_FLAG=-n -DEXE=<regional_model_f> -DPYTHON=<python3>
#         -DWORK=<dir> -P check_regional_model.cmake
#
# Runs: full at 4, 2 and 1 ranks; restart of the 4-rank run's checkpoint (step 18) at 2
# and at 4 ranks, of the 1-rank run's at 4. Checks:
# - halo: tessera's exchange equals the model's own MPI_Sendrecv exchange in every cell
#   (the rows beyond the walls kept), at 1, 2 and 4 ranks;
# - statistics: the spin-up's mean and std printed to the last digit (es23.15) the same
#   at 1, 2 and 4 ranks (exact sums);
# - training: 12 losses per run, finite, the 8th below the 1st; at 2 and 4 ranks within a
#   relative 1e-5 of the 1-rank run's;
# - restart: the exact global sums read back equal those written; the restart at the
#   writer's own rank count continues with the writer's losses and prediction bit for bit,
#   at another count with losses within a relative 1e-5 of the uninterrupted run's;
# - fields: the last state (the model alone, real64) bit-identical in every run, restarts
#   included; the emulator's prediction within 1e-6 of each field's largest magnitude of
#   the 1-rank run's prediction (measured: 1.1e-7, one f32 rounding of T near 270 K).

foreach(var MPIEXEC NUMPROC_FLAG EXE PYTHON WORK)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_regional_model.cmake: ${var} is not set")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

# run(<name> <np> <args>...): the model in WORK/<name>; its output into out_<name>.
function(run name np)
  file(MAKE_DIRECTORY "${WORK}/${name}")
  execute_process(COMMAND "${MPIEXEC}" ${NUMPROC_FLAG} ${np} "${EXE}" ${ARGN}
                  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${name} (${np} ranks: ${ARGN}):\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: the run at ${np} ranks failed with status ${rc}")
  endif()
  set(out_${name} "${out}" PARENT_SCOPE)
endfunction()

# line(<output> <regex> <var>): the one line of <output> matching <regex>.
function(line output regex var)
  string(REGEX MATCHALL "${regex}[^\n]*" lines "${output}")
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "expected one line matching '${regex}', found ${n}:\n${output}")
  endif()
  set(${var} "${lines}" PARENT_SCOPE)
endfunction()

set(number "-?[0-9]\\.[0-9]+E[-+][0-9]+")

# losses(<output> <n> <var>): the n losses, each checked finite.
function(losses output expected var)
  string(REGEX MATCHALL "train step [0-9]+: loss [^\n]*" lines "${output}")
  list(LENGTH lines n)
  if(NOT n EQUAL expected)
    message(FATAL_ERROR "expected ${expected} training steps, found ${n}:\n${output}")
  endif()
  set(values)
  foreach(l IN LISTS lines)
    if(NOT l MATCHES "loss +(${number})$")
      message(FATAL_ERROR "a loss that is not a finite number: '${l}'")
    endif()
    list(APPEND values "${CMAKE_MATCH_1}")
  endforeach()
  set(${var} "${values}" PARENT_SCOPE)
endfunction()

# close(<a> <b> <tolerance> <what>): lists of numbers, |a - b| <= tolerance |a| each.
function(close a b tolerance what)
  execute_process(COMMAND "${PYTHON}" -c [=[
import sys
a, b = (list(map(float, s.split(";"))) for s in sys.argv[1:3])
t = float(sys.argv[3])
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{worst:.3e}")
sys.exit(0 if len(a) == len(b) and worst <= t else 1)
]=] "${a}" "${b}" ${tolerance} RESULT_VARIABLE rc OUTPUT_VARIABLE worst)
  string(STRIP "${worst}" worst)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: relative difference ${worst} > ${tolerance}:\n${a}\n${b}")
  endif()
  message(STATUS "${what}: within ${tolerance} (largest relative difference ${worst})")
endfunction()

# close_fields(<file a> <file b> <tolerance> <what>): two (lon, lat, 2) real64 files, each
# field within tolerance * its largest magnitude in a.
function(close_fields a b tolerance what)
  execute_process(COMMAND "${PYTHON}" -c [=[
import array, sys
a, b = (array.array("d", open(p, "rb").read()) for p in sys.argv[1:3])
t = float(sys.argv[3])
n = len(a) // 2
worst = 0.0
for f in range(2):
    fa, fb = a[f * n:(f + 1) * n], b[f * n:(f + 1) * n]
    scale = max(abs(x) for x in fa)
    worst = max(worst, max(abs(x - y) for x, y in zip(fa, fb)) / scale)
print(f"{worst:.3e}")
sys.exit(0 if len(a) == len(b) == 2 * 48 * 43 and worst <= t else 1)
]=] "${WORK}/${a}" "${WORK}/${b}" ${tolerance} RESULT_VARIABLE rc OUTPUT_VARIABLE worst)
  string(STRIP "${worst}" worst)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: ${a} and ${b} differ by ${worst} (relative to the field) > ${tolerance}")
  endif()
  message(STATUS "${what}: within ${tolerance} (largest difference ${worst} of the field)")
endfunction()

function(identical a b what)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK}/${a}" "${WORK}/${b}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what}: ${a} and ${b} differ")
  endif()
  message(STATUS "${what}: ${a} and ${b} bit-identical")
endfunction()

run(full_np4 4 full full_np4)
run(full_np2 2 full full_np2)
run(full_np1 1 full full_np1)
run(restart_4to2 2 restart restart_4to2 full_np4)
run(restart_4to4 4 restart restart_4to4 full_np4)
run(restart_1to4 4 restart restart_1to4 full_np1)

foreach(np 1 2 4)
  set(o "${out_full_np${np}}")
  line("${o}" "halo exchange: " halo)
  if(NOT halo MATCHES "halo exchange: 0 of [1-9][0-9]* cells differ from the model's own exchange")
    message(FATAL_ERROR "${np} ranks: ${halo}")
  endif()
  line("${o}" "statistics of 10 steps:" stats_np${np})
  if(NOT stats_np${np} MATCHES "T mean +${number} std +${number} q mean +${number} std +${number}$")
    message(FATAL_ERROR "${np} ranks: no statistics in '${stats_np${np}}'")
  endif()
  losses("${o}" 12 loss_np${np})
  list(GET loss_np${np} 0 first)
  list(GET loss_np${np} 7 eighth)
  if(NOT eighth LESS first)
    message(FATAL_ERROR "${np} ranks: the loss did not decrease over 8 training steps: ${loss_np${np}}")
  endif()
  line("${o}" "restart written at step 18:" written_np${np})
endforeach()
message(STATUS "halo exchanges equal the model's own at 1, 2 and 4 ranks")
if(NOT stats_np2 STREQUAL stats_np1 OR NOT stats_np4 STREQUAL stats_np1)
  message(FATAL_ERROR "the statistics differ between rank counts:\n${stats_np1}\n${stats_np2}\n${stats_np4}")
endif()
message(STATUS "statistics identical at 1, 2 and 4 ranks: ${stats_np1}")
close("${loss_np1}" "${loss_np2}" 1e-5 "losses at 2 ranks against 1")
close("${loss_np1}" "${loss_np4}" 1e-5 "losses at 4 ranks against 1")

# Restarts: the sums read back are the sums written.
foreach(case 4to2:4 4to4:4 1to4:1)
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 writer)
  line("${out_restart_${name}}" "restart read at step 18:" read)
  string(REPLACE "restart read" "restart written" read "${read}")
  if(NOT read STREQUAL written_np${writer})
    message(FATAL_ERROR "restart ${name}: read '${read}', written '${written_np${writer}}'")
  endif()
  losses("${out_restart_${name}}" 4 after_${name})
endforeach()
message(STATUS "every restart read the sums its writer wrote")
# The 4 steps after the restart: the same bits at the writer's count, close at another.
list(SUBLIST loss_np4 8 4 after_np4)
list(SUBLIST loss_np1 8 4 after_np1)
if(NOT after_4to4 STREQUAL after_np4)
  message(FATAL_ERROR "restart at 4 ranks: losses ${after_4to4}, the uninterrupted run's ${after_np4}")
endif()
message(STATUS "restart at the writer's 4 ranks: the losses of the uninterrupted run bit for bit")
close("${after_np4}" "${after_4to2}" 1e-5 "losses after the 4-rank restart read at 2 ranks")
close("${after_np1}" "${after_1to4}" 1e-5 "losses after the 1-rank restart read at 4 ranks")

foreach(name full_np2 full_np4 restart_4to2 restart_4to4 restart_1to4)
  identical(full_np1/state.bin ${name}/state.bin "the last state")
endforeach()
identical(full_np4/prediction.bin restart_4to4/prediction.bin "the prediction after a restart at the same count")
foreach(name full_np2 full_np4 restart_4to2 restart_1to4)
  close_fields(full_np1/prediction.bin ${name}/prediction.bin 1e-6 "the prediction of ${name} against full_np1")
endforeach()
