# Runs watchdog_hang at 2 ranks and checks the collective watchdog: a rank stuck in a
# collective that another rank never joins reports the operation, the communicator and
# the missing rank, and the job ends (non-zero) within seconds instead of hanging; with
# every rank joining, nothing fires. Inputs: -DMPIEXEC=... -DEXE=... -DFLIGHT_DIR=...

function(run_case mode timeout_env)
  string(TIMESTAMP t0 "%s")
  # The watchdog also dumps the flight recorder (check_flight.cmake tests that): into the
  # build tree, not the working directory.
  execute_process(COMMAND ${CMAKE_COMMAND} -E env ${timeout_env} TESSERA_FLIGHT_DIR=${FLIGHT_DIR}
                          ${MPIEXEC} -n 2 ${EXE} ${mode}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 50)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  set(last_code "${code}" PARENT_SCOPE)
  set(last_text "${out}\n${err}" PARENT_SCOPE)
  set(last_seconds "${seconds}" PARENT_SCOPE)
endfunction()

function(expect_abort mode timeout_env)
  run_case(${mode} "${timeout_env}")
  if(last_code EQUAL 0 OR last_code MATCHES "timeout")
    message(FATAL_ERROR "${mode}: expected the watchdog to abort the job, got '${last_code}' after ${last_seconds} s:\n${last_text}")
  endif()
  if(NOT last_text MATCHES "tessera: collective watchdog: world rank 0 waited")
    message(FATAL_ERROR "${mode}: no watchdog report from rank 0:\n${last_text}")
  endif()
  set(last_text "${last_text}" PARENT_SCOPE)
  message(STATUS "${mode}: aborted after ${last_seconds} s")
endfunction()

# A tp collective rank 1 never joins: the report names the mesh's tp communicator, the
# call and rank 1.
expect_abort(collective "TESSERA_COLLECTIVE_TIMEOUT=1")
if(NOT last_text MATCHES "MPI_Allreduce on communicator 'tessera mesh tp' \\(rank 0 of 2\\) \\(call #2 on it\\)")
  message(FATAL_ERROR "collective: the report does not name the operation, communicator and call:\n${last_text}")
endif()
if(NOT last_text MATCHES "ranks of this communicator that have not reached it: 1 \\(they have started 1 calls\\)")
  message(FATAL_ERROR "collective: the report does not name rank 1 as missing:\n${last_text}")
endif()

# The same through the API instead of the environment.
expect_abort(api "TESSERA_COLLECTIVE_TIMEOUT=")
if(NOT last_text MATCHES "communicator 'tessera mesh world'.*not reached it: 1")
  message(FATAL_ERROR "api: the report does not name the world communicator and rank 1:\n${last_text}")
endif()

# A halo exchange rank 1 never starts.
expect_abort(halo "TESSERA_COLLECTIVE_TIMEOUT=1")
if(NOT last_text MATCHES "tessera mesh domain")
  message(FATAL_ERROR "halo: the report does not name the domain communicator:\n${last_text}")
endif()

# Every rank joins: the watchdog stays silent.
run_case(ok "TESSERA_COLLECTIVE_TIMEOUT=5")
if(NOT last_code EQUAL 0 OR last_text MATCHES "collective watchdog")
  message(FATAL_ERROR "ok: expected a clean run, got ${last_code}:\n${last_text}")
endif()
message(STATUS "collective watchdog: reports and aborts as expected")
