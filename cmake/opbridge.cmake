# opbridge_add_operator_library: builds an operator library from its specs and
# kernels — the same function for opbridge's own operators and for a user's.
#
#   opbridge_add_operator_library(<name>
#     SOURCES <spec.cpp, kernel.cpp, ...>
#     [ADAPTERS <adapter>...]         the runtimes to build for       (default: every adapter but
#                                     the opt-in ones, which are built only
#                                     when named, as executorch)
#     [TORCH_NAMESPACE <ns>]         torch.ops.<ns>.<op>             (default <name>)
#     [ONNX_DOMAIN <domain>]          the custom route's ONNX domain  (default <name>)
#     [DOMAIN_VERSION <n>]            that domain's opset version     (default 1)
#     [VERSION <version>]             the library's version           (default PROJECT_VERSION, else 0.0.0)
#     [ORT_LIBRARY_NAME <lib>]        lib<lib>.so for ONNX Runtime    (default <name>_ort)
#     [INCLUDE_DIRECTORIES <dir>...]  (the current source dir is always included)
#     [INSTALL_DESTINATION <dir>]     install the adapters' libraries there
#     [<an adapter's keyword> <value>]...)
#                                     (torch's: TORCH_MODULE_NAME, TORCH_LIBRARY_NAME)
#
# SOURCES may list CUDA kernels (kernel.cu). They are compiled only with
# -DOPBRIDGE_CUDA=ON (for CMAKE_CUDA_ARCHITECTURES, default 80;90); their
# OPBRIDGE_REGISTER_CUDA_KERNELS registrations then reach PyTorch (CUDA
# tensors; needs a CUDA build of torch) and ONNX Runtime (the CUDA execution
# provider). Without it the same library builds for the CPU alone.
#
# It makes <name>_core, the kernels, specs and opbridge's core (an OBJECT
# library), and the targets of each adapter in ADAPTERS.
#
# Each adapter is one folder, <adapter>_adapter/ under OPBRIDGE_SDK_CSRC, with
# its sources and <adapter>.cmake, which this file includes (every one it
# finds) and which holds everything the build knows of the adapter (what it
# makes, at its head: torch_adapter/torch.cmake, ort_adapter/ort.cmake, ...):
#   - it appends its name to the global property OPBRIDGE_ADAPTERS (built by
#     default) or OPBRIDGE_OPT_IN_ADAPTERS (built when ADAPTERS names it),
#     and the keywords of its own, if any, to OPBRIDGE_ADAPTER_KEYWORDS;
#   - _opbridge_adapter_<adapter>(<name> <out_var>) builds its targets from
#     <name>_core (_opbridge_library_objects) and its sources, or its SDK
#     part's objects (_opbridge_sdk_objects), reads the library's options as
#     the ARG_<KEYWORD> variables of opbridge_add_operator_library, and sets
#     <out_var> to the targets to install;
#   - _opbridge_sdk_part_<part>(<target>), for each SDK part it has (below):
#     the OBJECT library of its code that is the same for every library;
#   - _opbridge_own_adapter_<adapter>(<out_var>): whether opbridge's own
#     library (CMakeLists.txt) builds it, with the options that say so.
# opbridge's own build installs every adapter folder with the SDK and bundles
# what every installed target needs; a new runtime's adapter is a new folder.
#
# Needs OPBRIDGE_SDK_CSRC (opbridge's sources and public headers) and, for the
# ort adapter, OPBRIDGE_ORT_INCLUDE_DIR (ONNX Runtime's C/C++ headers): the
# installed package's opbridgeConfig.cmake sets both. The other adapters find
# their runtimes themselves.
include_guard(GLOBAL)

option(OPBRIDGE_WERROR "Treat compiler warnings as errors" OFF)
set(OPBRIDGE_COMPILE_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
if(OPBRIDGE_WERROR)
  list(APPEND OPBRIDGE_COMPILE_WARNINGS -Werror)
endif()

# The SIMD targets (Highway's) the kernels are compiled for: all that the
# compiler supports (each kernel is then dispatched to the CPU's best),
# less those named here, as Highway's HWY_DISABLED_TARGETS takes them
# ("HWY_SSSE3|HWY_SSE4|HWY_AVX3": SCALAR and AVX2 remain). Fewer targets
# compile in a fraction of the time: for test and development builds (the
# test suite's and ./dev test's builds of users' libraries use it), never for
# a library that ships. The environment variable of the same name sets it
# where the build is not configured by hand (pip, opbridge.sdk.build.load).
set(OPBRIDGE_HWY_DISABLED_TARGETS "$ENV{OPBRIDGE_HWY_DISABLED_TARGETS}"
    CACHE STRING "Highway targets not to compile the kernels for (HWY_DISABLED_TARGETS; empty: none)")

# ccache, where installed and the project chose no launcher, for the targets
# opbridge_add_operator_library makes: opbridge's own sources (the core and
# the adapters, about two thirds of a library's compile time) compile the same
# for every library, so a second library, or a rebuild in a fresh build
# folder, takes them from the cache.
option(OPBRIDGE_CCACHE "Compile operator libraries through ccache when it is installed" ON)
if(OPBRIDGE_CCACHE)
  find_program(OPBRIDGE_CCACHE_PROGRAM ccache)
endif()

option(OPBRIDGE_CUDA "Compile the operators' CUDA kernels (.cu sources) and register them with both runtimes" OFF)
if(OPBRIDGE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND CUDA_TOOLKIT_ROOT_DIR AND EXISTS "${CUDA_TOOLKIT_ROOT_DIR}/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "${CUDA_TOOLKIT_ROOT_DIR}/bin/nvcc")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(OPBRIDGE_CUDA_FLAGS -O3 --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra)
  if(OPBRIDGE_WERROR)
    list(APPEND OPBRIDGE_CUDA_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
  endif()
endif()

# The SDK objects: opbridge's own core and adapter code, which compiles the
# same for every library (a library's identity is its generated source), so
# it is compiled once. Each part (core, ort, openvino, torch, torch_stable,
# torch_cuda) comes either prebuilt with the installed package (sdk/lib/<part>,
# listed in sdk/lib/prebuilt.cmake with the build it was made for: the
# compiler and its flags, Highway, ONNX Runtime's headers, torch, OpenVINO),
# when this build matches that, or compiled here from the SDK's sources,
# once per project (the target opbridge_sdk_<part>). A cold build of a user's
# library then compiles the user's files only.
option(OPBRIDGE_PREBUILT_SDK "Link the installed package's prebuilt SDK objects where they fit this build" ON)

# What a part's objects depend on beyond its sources, as one text: prebuilt
# objects serve a build whose text for the part is the same.
function(_opbridge_sdk_facts out_var)
  find_package(hwy REQUIRED)
  set(_facts "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}" "flags '${CMAKE_CXX_FLAGS}'"
             "sdk ${OPBRIDGE_SDK_VERSION}" "hwy ${hwy_VERSION}" ${ARGN})
  string(REPLACE ";" ", " _facts "${_facts}")
  set(${out_var} "${_facts}" PARENT_SCOPE)
endfunction()

# Sets out_var to the part's objects, to list among a target's sources; the
# arguments after out_var are what the part's objects depend on beside the
# compiler, Highway and the SDK (the runtime's version or API), which its
# adapter knows.
function(_opbridge_sdk_objects part out_var)
  _opbridge_sdk_facts(_facts ${ARGN})
  if(OPBRIDGE_PREBUILT_SDK AND OPBRIDGE_PREBUILT_${part}_OBJECTS)
    if(_facts STREQUAL OPBRIDGE_PREBUILT_${part}_FOR)
      set(${out_var} ${OPBRIDGE_PREBUILT_${part}_OBJECTS} PARENT_SCOPE)
      return()
    endif()
    message(STATUS "opbridge: compiling the SDK's ${part} code: its prebuilt objects were built for "
                   "${OPBRIDGE_PREBUILT_${part}_FOR}; this build is ${_facts}")
  endif()
  set(_target opbridge_sdk_${part})
  if(NOT TARGET ${_target})
    cmake_language(CALL _opbridge_sdk_part_${part} ${_target})
    set_target_properties(${_target} PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                                VISIBILITY_INLINES_HIDDEN ON)
    target_compile_features(${_target} PRIVATE cxx_std_17)
    target_include_directories(${_target} PRIVATE "${OPBRIDGE_SDK_CSRC}")
    target_compile_definitions(${_target} PRIVATE OPBRIDGE_VERSION="${OPBRIDGE_SDK_VERSION}")
    target_compile_options(${_target} PRIVATE ${OPBRIDGE_COMPILE_WARNINGS})
    find_package(hwy REQUIRED)
    target_link_libraries(${_target} PRIVATE hwy::hwy)
    set_property(GLOBAL APPEND PROPERTY OPBRIDGE_SDK_PARTS ${part})
    set_property(GLOBAL PROPERTY OPBRIDGE_SDK_PART_FOR_${part} "${_facts}")
  endif()
  set(${out_var} $<TARGET_OBJECTS:${_target}> PARENT_SCOPE)
endfunction()

# A library's own objects (its kernels, specs, identity) and the SDK's core.
function(_opbridge_library_objects name out_var)
  _opbridge_sdk_objects(core _core)
  set(${out_var} $<TARGET_OBJECTS:${name}_core> ${_core} PARENT_SCOPE)
endfunction()

function(_opbridge_sdk_part_core target)
  file(GLOB _sources CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/opbridge/*.cpp")
  list(FILTER _sources EXCLUDE REGEX "/simd\\.cpp$")
  add_library(${target} OBJECT ${_sources})
endfunction()

function(opbridge_add_operator_library name)
  get_property(_keywords GLOBAL PROPERTY OPBRIDGE_ADAPTER_KEYWORDS)
  cmake_parse_arguments(
    PARSE_ARGV 1 ARG ""
    "TORCH_NAMESPACE;ONNX_DOMAIN;DOMAIN_VERSION;VERSION;ORT_LIBRARY_NAME;INSTALL_DESTINATION;${_keywords}"
    "SOURCES;INCLUDE_DIRECTORIES;ADAPTERS")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "opbridge_add_operator_library(${name}): SOURCES is required")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "opbridge_add_operator_library(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS} "
                        "(the adapters to build go in ADAPTERS)")
  endif()
  if(NOT OPBRIDGE_SDK_CSRC OR NOT EXISTS "${OPBRIDGE_SDK_CSRC}/opbridge/spec.h")
    message(FATAL_ERROR "opbridge_add_operator_library: OPBRIDGE_SDK_CSRC does not hold opbridge's sources "
                        "(find_package(opbridge CONFIG) sets it)")
  endif()

  # The adapters: ADAPTERS, else all of them.
  get_property(_known GLOBAL PROPERTY OPBRIDGE_ADAPTERS)
  if("ADAPTERS" IN_LIST ARG_KEYWORDS_MISSING_VALUES)
    set(_adapters)
  elseif(DEFINED ARG_ADAPTERS)
    set(_adapters ${ARG_ADAPTERS})
  else()
    set(_adapters ${_known})
  endif()
  get_property(_opt_in GLOBAL PROPERTY OPBRIDGE_OPT_IN_ADAPTERS)
  list(APPEND _known ${_opt_in})
  list(REMOVE_DUPLICATES _adapters)
  foreach(_adapter IN LISTS _adapters)
    if(NOT _adapter IN_LIST _known OR NOT COMMAND _opbridge_adapter_${_adapter})
      string(REPLACE ";" ", " _accepted "${_known}")
      message(FATAL_ERROR "opbridge_add_operator_library(${name}): unknown adapter '${_adapter}' in ADAPTERS "
                          "(accepted: ${_accepted})")
    endif()
  endforeach()

  foreach(field TORCH_NAMESPACE ONNX_DOMAIN)
    if(NOT ARG_${field})
      set(ARG_${field} "${name}")
    endif()
  endforeach()
  if(NOT ARG_DOMAIN_VERSION)
    set(ARG_DOMAIN_VERSION 1)
  endif()
  if(NOT ARG_VERSION)
    set(ARG_VERSION "${PROJECT_VERSION}")
  endif()
  if(NOT ARG_VERSION)
    set(ARG_VERSION "0.0.0")
  endif()
  if(NOT ARG_ORT_LIBRARY_NAME)
    set(ARG_ORT_LIBRARY_NAME "${name}_ort")
  endif()
  if(NOT ARG_TORCH_NAMESPACE MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "opbridge_add_operator_library(${name}): TORCH_NAMESPACE must be a Python "
                        "identifier, got '${ARG_TORCH_NAMESPACE}'")
  endif()

  # Function scope: the launcher reaches this library's targets only.
  if(OPBRIDGE_CCACHE AND OPBRIDGE_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER
     AND NOT DEFINED ENV{CMAKE_CXX_COMPILER_LAUNCHER})
    set(CMAKE_CXX_COMPILER_LAUNCHER "${OPBRIDGE_CCACHE_PROGRAM}")
  endif()

  find_package(hwy REQUIRED)

  # The library's kernels and specs, its identity (one generated source) and
  # the SIMD table (opbridge/simd.cpp, compiled with the kernels' targets).
  # opbridge's own core and adapter code comes as SDK objects, the same for
  # every library (_opbridge_sdk_objects).
  set(_sources ${ARG_SOURCES})
  if(NOT OPBRIDGE_CUDA)
    list(FILTER _sources EXCLUDE REGEX "\\.cu$")
  endif()
  set(_identity "${CMAKE_CURRENT_BINARY_DIR}/opbridge_${name}_identity.cpp")
  file(
    CONFIGURE OUTPUT "${_identity}"
    CONTENT [[// Generated by opbridge_add_operator_library(@name@): who this library is.
#include "opbridge/library.h"

namespace opbridge {

const LibraryInfo& ThisLibrary() {
  static const LibraryInfo info{"@name@", "@ARG_TORCH_NAMESPACE@", "@ARG_ONNX_DOMAIN@", @ARG_DOMAIN_VERSION@,
                                "@ARG_VERSION@"};
  return info;
}

}  // namespace opbridge
]]
    @ONLY)
  add_library(${name}_core OBJECT ${_sources} "${_identity}" "${OPBRIDGE_SDK_CSRC}/opbridge/simd.cpp")
  set_target_properties(${name}_core PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                                CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_compile_features(${name}_core PUBLIC cxx_std_17)
  target_include_directories(${name}_core PUBLIC "${OPBRIDGE_SDK_CSRC}" "${CMAKE_CURRENT_SOURCE_DIR}"
                                                 ${ARG_INCLUDE_DIRECTORIES})
  target_compile_definitions(${name}_core PUBLIC OPBRIDGE_VERSION="${OPBRIDGE_SDK_VERSION}")
  target_compile_options(${name}_core PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${OPBRIDGE_COMPILE_WARNINGS}>")
  if(OPBRIDGE_HWY_DISABLED_TARGETS)
    message(STATUS "opbridge: ${name}'s kernels are not compiled for ${OPBRIDGE_HWY_DISABLED_TARGETS} "
                   "(OPBRIDGE_HWY_DISABLED_TARGETS: a test build, slower on CPUs those targets serve)")
    target_compile_definitions(${name}_core PRIVATE "HWY_DISABLED_TARGETS=(${OPBRIDGE_HWY_DISABLED_TARGETS})")
  endif()
  target_link_libraries(${name}_core PUBLIC hwy::hwy)
  if(OPBRIDGE_CUDA)
    target_compile_features(${name}_core PUBLIC cuda_std_17)
    target_compile_options(${name}_core PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:${OPBRIDGE_CUDA_FLAGS}>")
    target_compile_definitions(${name}_core PUBLIC OPBRIDGE_WITH_CUDA=1)
    target_link_libraries(${name}_core PUBLIC CUDA::cudart)
  endif()

  set(_installed)
  foreach(_adapter IN LISTS _adapters)
    set(_targets)
    cmake_language(CALL _opbridge_adapter_${_adapter} ${name} _targets)
    list(APPEND _installed ${_targets})
  endforeach()
  # What the library's adapters made, for a build that installs them with what
  # they need (opbridge's own: CMakeLists.txt).
  set_property(GLOBAL PROPERTY OPBRIDGE_LIBRARY_TARGETS_${name} ${_installed})

  if(ARG_INSTALL_DESTINATION AND _installed)
    install(TARGETS ${_installed} LIBRARY DESTINATION "${ARG_INSTALL_DESTINATION}")
    # Highway's run-time library goes beside the libraries, found through
    # $ORIGIN: an installed package (a wheel) runs without the Debian package.
    _opbridge_bundle_shared(hwy::hwy "${ARG_INSTALL_DESTINATION}")
    foreach(_target IN LISTS _installed)
      get_target_property(_rpath ${_target} INSTALL_RPATH)
      if(_rpath)
        set_target_properties(${_target} PROPERTIES INSTALL_RPATH "$ORIGIN;${_rpath}")
      else()
        set_target_properties(${_target} PROPERTIES INSTALL_RPATH "$ORIGIN")
      endif()
    endforeach()
  endif()
endfunction()

# Installs the shared library file of an imported target under its soname.
function(_opbridge_bundle_shared target destination)
  get_target_property(_type ${target} TYPE)
  if(NOT _type STREQUAL "SHARED_LIBRARY")
    return()  # a static Highway is linked in already
  endif()
  get_target_property(_configs ${target} IMPORTED_CONFIGURATIONS)
  foreach(_config IN LISTS _configs)
    get_target_property(_file ${target} IMPORTED_LOCATION_${_config})
    get_target_property(_soname ${target} IMPORTED_SONAME_${_config})
    if(_file AND _soname)
      install(FILES "${_file}" DESTINATION "${destination}" RENAME "${_soname}")
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "opbridge: cannot find the shared library file of ${target} to install")
endfunction()

# The adapters: every <adapter>_adapter/<adapter>.cmake of the SDK's sources
# (opbridge's csrc/ in its own build, sdk/csrc/ in the installed package).
file(GLOB OPBRIDGE_ADAPTER_FILES CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/*_adapter/*.cmake")
foreach(_opbridge_adapter_file IN LISTS OPBRIDGE_ADAPTER_FILES)
  include("${_opbridge_adapter_file}")
endforeach()
