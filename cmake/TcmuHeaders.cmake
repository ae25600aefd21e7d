# Provides the INTERFACE target cowstore_tcmu_headers: the include paths of
# tcmu-runner 1.5.4's source tree, which handler/plugin compiles against.
# Nothing of tcmu-runner is committed; the tree comes from, in order:
#
#   COWSTORE_TCMU_SOURCE=<dir>      an extracted tcmu-runner 1.5.4 tree
#   COWSTORE_TCMU_SOURCE=<tarball>  tcmu_1.5.4.orig.tar.xz (sha256 verified
#                                   against COWSTORE_TCMU_SHA256), extracted
#                                   into the build directory
#   (unset)                         tools/fetch-tcmu-headers.sh: Debian's
#                                   source package `tcmu` via apt-get source,
#                                   sha256 verified, into the build directory
#
# Sets COWSTORE_TCMU_SOURCE_DIR (the tree actually used) and
# COWSTORE_TCMU_HEADERS_FOUND. With `REQUIRED` semantics left to the caller:
# handler/plugin fails the configure with a clear message when the headers
# cannot be had and COWSTORE_BUILD_PLUGIN is ON.

set(COWSTORE_TCMU_SOURCE "" CACHE PATH
    "tcmu-runner 1.5.4 source: an extracted tree or tcmu_1.5.4.orig.tar.xz (empty: apt-get source tcmu)")
set(COWSTORE_TCMU_SHA256 "9dd159ce9692550731728b30b788ecf7adaa3cfdcd74f868e1caaa6e723ba5d7" CACHE STRING
    "Expected sha256 of the tcmu-runner tarball given in COWSTORE_TCMU_SOURCE")

set(COWSTORE_TCMU_HEADERS_FOUND FALSE)
set(COWSTORE_TCMU_ERROR "")
set(_tcmu_deps ${CMAKE_BINARY_DIR}/_deps/tcmu)

# The headers handler/plugin includes, directly or through tcmu-runner.h.
set(_tcmu_required
  tcmu-runner.h libtcmu.h libtcmu_common.h libtcmu_log.h scsi_defs.h scsi.h alua.h
  ccan/ccan/list/list.h ccan/ccan/str/str.h ccan/ccan/str/str_debug.h
  ccan/ccan/container_of/container_of.h ccan/ccan/check_type/check_type.h
  ccan/ccan/build_assert/build_assert.h)

function(_cowstore_tcmu_check_tree dir out_ok out_why)
  foreach(h IN LISTS _tcmu_required)
    if(NOT EXISTS "${dir}/${h}")
      set(${out_ok} FALSE PARENT_SCOPE)
      set(${out_why} "${dir} lacks ${h}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  # The tarball's CMakeLists.txt names the version; an extracted tree without
  # it is accepted (the ABI static_asserts in handler/plugin still apply).
  if(EXISTS "${dir}/CMakeLists.txt")
    file(STRINGS "${dir}/CMakeLists.txt" _v REGEX "^set\\(VERSION ")
    if(_v AND NOT _v MATCHES "VERSION 1\\.5\\.4\\)")
      set(${out_ok} FALSE PARENT_SCOPE)
      set(${out_why} "${dir} is not tcmu-runner 1.5.4 (${_v})" PARENT_SCOPE)
      return()
    endif()
  endif()
  set(${out_ok} TRUE PARENT_SCOPE)
  set(${out_why} "" PARENT_SCOPE)
endfunction()

set(_tcmu_dir "")
if(COWSTORE_TCMU_SOURCE AND IS_DIRECTORY "${COWSTORE_TCMU_SOURCE}")
  set(_tcmu_dir "${COWSTORE_TCMU_SOURCE}")
elseif(COWSTORE_TCMU_SOURCE)
  if(NOT EXISTS "${COWSTORE_TCMU_SOURCE}")
    set(COWSTORE_TCMU_ERROR "COWSTORE_TCMU_SOURCE=${COWSTORE_TCMU_SOURCE} does not exist")
  else()
    file(SHA256 "${COWSTORE_TCMU_SOURCE}" _sum)
    if(NOT _sum STREQUAL COWSTORE_TCMU_SHA256)
      set(COWSTORE_TCMU_ERROR
          "${COWSTORE_TCMU_SOURCE}: sha256 ${_sum}, expected ${COWSTORE_TCMU_SHA256} (tcmu_1.5.4.orig.tar.xz)")
    else()
      set(_stamp "${_tcmu_deps}/tarball.ok")
      if(NOT EXISTS "${_stamp}" OR NOT EXISTS "${_tcmu_deps}/tcmu-1.5.4/tcmu-runner.h")
        file(REMOVE_RECURSE "${_tcmu_deps}/tcmu-1.5.4")
        file(MAKE_DIRECTORY "${_tcmu_deps}")
        file(ARCHIVE_EXTRACT INPUT "${COWSTORE_TCMU_SOURCE}" DESTINATION "${_tcmu_deps}")
        file(WRITE "${_stamp}" "${_sum}\n")
      endif()
      set(_tcmu_dir "${_tcmu_deps}/tcmu-1.5.4")
    endif()
  endif()
else()
  execute_process(
    COMMAND sh ${PROJECT_SOURCE_DIR}/tools/fetch-tcmu-headers.sh ${_tcmu_deps}
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(_rc EQUAL 0)
    set(_tcmu_dir "${_tcmu_deps}/tcmu-1.5.4")
  else()
    string(STRIP "${_err}" _err)
    set(COWSTORE_TCMU_ERROR "tools/fetch-tcmu-headers.sh failed: ${_err}")
  endif()
endif()

if(_tcmu_dir)
  _cowstore_tcmu_check_tree("${_tcmu_dir}" _ok _why)
  if(_ok)
    set(COWSTORE_TCMU_HEADERS_FOUND TRUE)
  else()
    set(COWSTORE_TCMU_ERROR "${_why}")
  endif()
endif()

if(COWSTORE_TCMU_HEADERS_FOUND)
  set(COWSTORE_TCMU_SOURCE_DIR "${_tcmu_dir}")
  message(STATUS "tcmu-runner 1.5.4 headers: ${COWSTORE_TCMU_SOURCE_DIR}")
  if(NOT TARGET cowstore_tcmu_headers)
    add_library(cowstore_tcmu_headers INTERFACE)
    # SYSTEM: their warnings are not ours to fix (-Werror).
    target_include_directories(cowstore_tcmu_headers SYSTEM INTERFACE
      ${COWSTORE_TCMU_SOURCE_DIR} ${COWSTORE_TCMU_SOURCE_DIR}/ccan)
  endif()
endif()
