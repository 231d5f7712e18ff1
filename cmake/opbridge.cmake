# opbridge_add_operator_library: builds an operator library from its specs and
# kernels — the same function for opbridge's own operators and for a user's.
#
#   opbridge_add_operator_library(<name>
#     SOURCES <spec.cpp, kernel.cpp, ...>
#     [ADAPTERS <adapter>...]         the runtimes to build for       (default: torch ort openvino;
#                                     executorch only when named)
#     [TORCH_NAMESPACE <ns>]         torch.ops.<ns>.<op>             (default <name>)
#     [ONNX_DOMAIN <domain>]          the custom route's ONNX domain  (default <name>)
#     [DOMAIN_VERSION <n>]            that domain's opset version     (default 1)
#     [VERSION <version>]             the library's version           (default PROJECT_VERSION, else 0.0.0)
#     [TORCH_MODULE_NAME <module>]    the Python module               (default <name>_torch)
#     [TORCH_LIBRARY_NAME <lib>]      lib<lib>.so for PyTorch         (default <name>_torch)
#     [ORT_LIBRARY_NAME <lib>]        lib<lib>.so for ONNX Runtime    (default <name>_ort)
#     [INCLUDE_DIRECTORIES <dir>...]  (the current source dir is always included)
#     [INSTALL_DESTINATION <dir>])    install the adapters' libraries there
#
# SOURCES may list CUDA kernels (kernel.cu). They are compiled only with
# -DOPBRIDGE_CUDA=ON (for CMAKE_CUDA_ARCHITECTURES, default 80;90); their
# OPBRIDGE_REGISTER_CUDA_KERNELS registrations then reach PyTorch (CUDA
# tensors; needs a CUDA build of torch) and ONNX Runtime (the CUDA execution
# provider). Without it the same library builds for the CPU alone.
#
# It makes <name>_core, the kernels, specs and opbridge's core (an OBJECT
# library), and one target per adapter in ADAPTERS:
#   torch  <name>_torch_library (lib<name>_torch.so), the PyTorch library: every
#          spec's op + backward with CPU/Meta/Autograd kernels, no Python in
#          it; it registers them when opbridge_register_torch_operators()
#          is called (torch_adapter/torch_library.h, for C++ hosts that link
#          libtorch). And <name>_torch, the Python extension module over it:
#          opbridge.load_library(path) imports it (which loads the library
#          from beside it) and, once its namespace and ops are found free,
#          has it register them;
#   ort    <name>_ort, an ONNX Runtime custom-op library for the domain; it
#          exports RegisterCustomOps and OpbridgeLibraryInfo /
#          OpbridgeDomainVersion (ort_adapter/library_info.h, what it
#          implements, for C++ hosts) and links no libonnxruntime.
#   openvino  <name>_openvino (lib<name>_openvino.so), an OpenVINO extension
#          library (core.add_extension): the ONNX frontend's conversion of the
#          domain's nodes and the ops an IR of them reads back with. Built
#          only where OpenVINO's CMake package is found (OpenVINO_DIR, else
#          the openvino Python package's); skipped with a message otherwise.
#
# Each adapter is one function, _opbridge_adapter_<adapter>(<name> <out_var>),
# named in the OPBRIDGE_ADAPTERS global property: it builds the adapter's
# target from <name>_core (and the adapter's sources under OPBRIDGE_SDK_CSRC),
# reads the library's options as the ARG_<KEYWORD> variables of
# opbridge_add_operator_library, and sets <out_var> to the targets to install.
# Supporting another runtime is one more such function and its name in that
# property (plus, if it needs one, an option keyword of its own).
#
# Needs OPBRIDGE_SDK_CSRC (opbridge's sources and public headers) and, for the
# ort adapter, OPBRIDGE_ORT_INCLUDE_DIR (ONNX Runtime's C/C++ headers): the
# installed package's opbridgeConfig.cmake sets both. The openvino adapter
# finds OpenVINO itself.
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

# The PyTorch library on LibTorch's stable ABI (torch_adapter/stable_adapter.cpp):
# one build loads in every torch from OPBRIDGE_TORCH_TARGET_VERSION on; CPU
# kernels only (no CUDA yet), Meta and autograd registered from Python.
option(OPBRIDGE_TORCH_STABLE_ABI "Build the PyTorch library on LibTorch's stable ABI (CPU kernels)" OFF)
# Beside the default-ABI library (the build's torch, at full speed), a
# stable-ABI one, lib<name>_torch_stable.so, that the extension module loads
# under any other torch from OPBRIDGE_TORCH_TARGET_VERSION on: one wheel for
# every recent torch. CPU builds only (the stable library has no CUDA kernels).
option(OPBRIDGE_TORCH_STABLE_FALLBACK "Also build the stable-ABI PyTorch library, loaded under another torch" ON)
# The oldest torch the stable-ABI library targets: 2.12 gives the schema tags
# (pt2_compliant) through the stable C API; parallel_for, the version-aware
# dispatcher calls and the lists and strings of the stack are 2.10.
set(OPBRIDGE_TORCH_TARGET_VERSION "2.12" CACHE STRING "Oldest torch (major.minor) of the stable-ABI PyTorch library")
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

# torch and the Python development files, once per project.
macro(_opbridge_find_torch)
  if(NOT TARGET torch)
    find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _opbridge_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
    list(APPEND CMAKE_PREFIX_PATH "${_opbridge_torch_prefix}")
    find_package(Torch REQUIRED)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.__version__)"
      OUTPUT_VARIABLE OPBRIDGE_TORCH_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.version.cuda or '')"
      OUTPUT_VARIABLE OPBRIDGE_TORCH_CUDA OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
    # at::parallel_for is inline: without OpenMP in the extension it runs on
    # one thread. Compile its pragmas and link the libgomp that torch ships,
    # so kernels share torch's intra-op pool instead of starting a second one.
    find_file(OPBRIDGE_TORCH_LIBGOMP libgomp.so.1 PATHS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
    if(NOT OPBRIDGE_TORCH_LIBGOMP)
      message(WARNING "torch ships no libgomp.so.1: PyTorch kernels will run on one thread")
    endif()
  endif()
endmacro()

# The adapters opbridge_add_operator_library knows, in its default order,
# and those it builds only when ADAPTERS names them: ExecuTorch's
# (executorch_adapter/executorch.cmake, beside the adapter's sources), which
# needs the executorch package.
set_property(GLOBAL PROPERTY OPBRIDGE_ADAPTERS torch ort openvino)
set_property(GLOBAL PROPERTY OPBRIDGE_OPT_IN_ADAPTERS executorch)
if(EXISTS "${OPBRIDGE_SDK_CSRC}/executorch_adapter/executorch.cmake")
  include("${OPBRIDGE_SDK_CSRC}/executorch_adapter/executorch.cmake")
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
function(_opbridge_sdk_facts part out_var)
  find_package(hwy REQUIRED)
  set(_facts "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}" "flags '${CMAKE_CXX_FLAGS}'"
             "sdk ${OPBRIDGE_SDK_VERSION}" "hwy ${hwy_VERSION}")
  if(part STREQUAL "ort")
    file(STRINGS "${OPBRIDGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h" _api REGEX "^#define ORT_API_VERSION [0-9]+")
    list(APPEND _facts "${_api}")
  elseif(part STREQUAL "openvino")
    list(APPEND _facts "openvino ${OpenVINO_VERSION}")
  elseif(part MATCHES "^torch")
    list(APPEND _facts "torch ${OPBRIDGE_TORCH_VERSION}" "target ${OPBRIDGE_TORCH_TARGET_VERSION}")
  endif()
  string(REPLACE ";" ", " _facts "${_facts}")
  set(${out_var} "${_facts}" PARENT_SCOPE)
endfunction()

# The PyTorch part this build uses: the stable ABI's, the CUDA one, or the default.
function(_opbridge_torch_part out_var)
  if(OPBRIDGE_TORCH_STABLE_ABI)
    set(${out_var} torch_stable PARENT_SCOPE)
  elseif(OPBRIDGE_CUDA)
    set(${out_var} torch_cuda PARENT_SCOPE)
  else()
    set(${out_var} torch PARENT_SCOPE)
  endif()
endfunction()

# Sets out_var to the part's objects, to list among a target's sources.
function(_opbridge_sdk_objects part out_var)
  _opbridge_sdk_facts(${part} _facts)
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

function(_opbridge_sdk_part_ort target)
  file(GLOB _sources CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/ort_adapter/*.cpp")
  add_library(${target} OBJECT ${_sources})
  target_include_directories(${target} SYSTEM PRIVATE "${OPBRIDGE_ORT_INCLUDE_DIR}")
endfunction()

function(_opbridge_sdk_part_openvino target)
  file(GLOB _sources CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/openvino_adapter/*.cpp")
  add_library(${target} OBJECT ${_sources})
  target_link_libraries(${target} PRIVATE openvino::runtime openvino::threading openvino::frontend::onnx)
endfunction()

# The PyTorch library's adapter (not module.cpp, the Python module's, nor
# autoregister.cpp, the registering library's, which each library compiles
# with its names): adapter.cpp on the default ABI,
# stable_adapter.cpp on the stable one.
function(_opbridge_sdk_part_torch target)
  set(_here "${OPBRIDGE_SDK_CSRC}/torch_adapter")
  file(GLOB _sources CONFIGURE_DEPENDS "${_here}/*.cpp")
  list(REMOVE_ITEM _sources "${_here}/module.cpp" "${_here}/autoregister.cpp" "${_here}/stable_adapter.cpp")
  add_library(${target} OBJECT ${_sources})
  _opbridge_torch_settings(${target})
  # at::parallel_for is inline: without OpenMP in the extension it runs on
  # one thread; its pragmas are compiled, and torch's libgomp is linked.
  if(OPBRIDGE_TORCH_LIBGOMP)
    target_compile_options(${target} PRIVATE -fopenmp)
  endif()
endfunction()

function(_opbridge_sdk_part_torch_cuda target)
  _opbridge_sdk_part_torch(${target})
  target_compile_definitions(${target} PRIVATE OPBRIDGE_WITH_CUDA=1)
  target_link_libraries(${target} PRIVATE CUDA::cudart)
endfunction()

function(_opbridge_sdk_part_torch_stable target)
  set(_here "${OPBRIDGE_SDK_CSRC}/torch_adapter")
  file(GLOB _sources CONFIGURE_DEPENDS "${_here}/*.cpp")
  list(REMOVE_ITEM _sources "${_here}/module.cpp" "${_here}/autoregister.cpp" "${_here}/adapter.cpp")
  add_library(${target} OBJECT ${_sources})
  _opbridge_torch_settings(${target})
  string(REPLACE "." ";" _target "${OPBRIDGE_TORCH_TARGET_VERSION}")
  list(GET _target 0 _target_major)
  list(GET _target 1 _target_minor)
  math(EXPR _target_hex "(${_target_major} << 8) | ${_target_minor}" OUTPUT_FORMAT HEXADECIMAL)
  string(REPLACE "0x" "" _target_hex "${_target_hex}")
  string(LENGTH "${_target_hex}" _length)
  if(_length LESS 4)
    string(PREPEND _target_hex "0")
  endif()
  target_compile_definitions(${target} PRIVATE "TORCH_TARGET_VERSION=0x${_target_hex}000000000000ULL"
                                               OPBRIDGE_TORCH_STABLE_ABI=1)
endfunction()

# torch's headers and flags, and the standard they require (C++20 from 2.14).
function(_opbridge_torch_settings target)
  target_link_libraries(${target} PRIVATE torch)
  target_include_directories(${target} SYSTEM PRIVATE "${TORCH_INSTALL_PREFIX}/include")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_minor "${OPBRIDGE_TORCH_VERSION}")
  if(_torch_minor VERSION_GREATER_EQUAL 2.14)
    set_target_properties(${target} PROPERTIES CXX_STANDARD 20)
  endif()
endfunction()

# ONNX Runtime: <name>_ort, a custom-op library (ort_adapter/).
function(_opbridge_adapter_ort name out_var)
  if(NOT EXISTS "${OPBRIDGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h")
    message(FATAL_ERROR "ONNX Runtime headers not found in '${OPBRIDGE_ORT_INCLUDE_DIR}' (OPBRIDGE_ORT_INCLUDE_DIR)")
  endif()
  _opbridge_sdk_objects(ort _sdk_ort)
  _opbridge_library_objects(${name} _objects)
  add_library(${name}_ort SHARED ${_sdk_ort} ${_objects})
  set_target_properties(${name}_ort PROPERTIES OUTPUT_NAME "${ARG_ORT_LIBRARY_NAME}" CXX_VISIBILITY_PRESET hidden
                                               VISIBILITY_INLINES_HIDDEN ON
                                               LINK_DEPENDS "${OPBRIDGE_SDK_CSRC}/ort_adapter/exports.map")
  target_include_directories(${name}_ort SYSTEM PRIVATE "${OPBRIDGE_ORT_INCLUDE_DIR}")
  target_link_libraries(${name}_ort PRIVATE ${name}_core)
  target_compile_options(${name}_ort PRIVATE ${OPBRIDGE_COMPILE_WARNINGS})
  target_link_options(${name}_ort PRIVATE "-Wl,--no-undefined" "-Wl,--exclude-libs,ALL"
                      "-Wl,--version-script=${OPBRIDGE_SDK_CSRC}/ort_adapter/exports.map")
  set(${out_var} ${name}_ort PARENT_SCOPE)
endfunction()

# PyTorch (torch_adapter/): <name>_torch_library, lib<TORCH_LIBRARY_NAME>.so,
# the operators' registrations and kernels with no Python in it (what a C++
# host that links libtorch loads); and <name>_torch, the Python extension
# module, a thin layer that loads that library from beside itself.
function(_opbridge_adapter_torch name out_var)
  _opbridge_find_torch()
  if(OPBRIDGE_CUDA AND NOT OPBRIDGE_TORCH_CUDA)
    message(FATAL_ERROR "OPBRIDGE_CUDA=ON needs a CUDA build of torch for the PyTorch extension; torch "
                        "${OPBRIDGE_TORCH_VERSION} has no CUDA (or build with ADAPTERS ort)")
  endif()
  if(OPBRIDGE_TORCH_STABLE_ABI AND OPBRIDGE_CUDA)
    message(FATAL_ERROR "OPBRIDGE_TORCH_STABLE_ABI=ON registers CPU kernels only; build CUDA with it OFF")
  endif()
  # The kernels and the ONNX Runtime library are C++17; the torch adapter and
  # module compile with the standard torch's headers require (C++20 from 2.14).
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _torch_minor "${OPBRIDGE_TORCH_VERSION}")

  _opbridge_torch_part(_part)
  _opbridge_library_objects(${name} _objects)
  set(_library ${name}_torch_library)
  _opbridge_torch_library(${name} ${_library} ${_part} "${ARG_TORCH_LIBRARY_NAME}" "${_objects}")
  set(_libraries ${_library} ${_library}_kernels)
  set(_stable_file "")
  if(OPBRIDGE_TORCH_STABLE_FALLBACK AND NOT OPBRIDGE_TORCH_STABLE_ABI AND NOT OPBRIDGE_CUDA)
    _opbridge_torch_library(${name} ${name}_torch_stable_library torch_stable "${ARG_TORCH_LIBRARY_NAME}_stable"
                            "${_objects}")
    list(APPEND _libraries ${name}_torch_stable_library ${name}_torch_stable_library_kernels)
    set(_stable_file "lib${ARG_TORCH_LIBRARY_NAME}_stable.so")
  endif()

  # The module: pybind11 (from torch's headers) and the library's table; it
  # links neither libtorch nor the kernels.
  Python3_add_library(${name}_torch MODULE WITH_SOABI "${OPBRIDGE_SDK_CSRC}/torch_adapter/module.cpp")
  set_target_properties(${name}_torch PROPERTIES OUTPUT_NAME "${ARG_TORCH_MODULE_NAME}" CXX_VISIBILITY_PRESET hidden
                                                 VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(
    ${name}_torch PRIVATE "$<TARGET_PROPERTY:${name}_core,INTERFACE_INCLUDE_DIRECTORIES>")
  target_include_directories(${name}_torch SYSTEM PRIVATE "${TORCH_INSTALL_PREFIX}/include")
  # The library's identity, and torch's ABI flags: the table passes std::string.
  target_compile_definitions(${name}_torch PRIVATE "$<TARGET_PROPERTY:${name}_core,INTERFACE_COMPILE_DEFINITIONS>")
  target_compile_options(${name}_torch PRIVATE ${OPBRIDGE_COMPILE_WARNINGS}
                                               "$<TARGET_PROPERTY:torch,INTERFACE_COMPILE_OPTIONS>")
  if(_torch_minor VERSION_GREATER_EQUAL 2.14)
    set_target_properties(${name}_torch PROPERTIES CXX_STANDARD 20)
  endif()
  target_link_libraries(${name}_torch PRIVATE ${CMAKE_DL_LIBS})
  target_compile_definitions(
    ${name}_torch PRIVATE OPBRIDGE_MODULE_NAME=${ARG_TORCH_MODULE_NAME}
                          OPBRIDGE_ORT_LIBRARY_FILE="lib${ARG_ORT_LIBRARY_NAME}.so"
                          OPBRIDGE_TORCH_LIBRARY_FILE="lib${ARG_TORCH_LIBRARY_NAME}.so"
                          OPBRIDGE_TORCH_VERSION="${OPBRIDGE_TORCH_VERSION}")
  if(OPBRIDGE_TORCH_STABLE_ABI)
    target_compile_definitions(${name}_torch PRIVATE OPBRIDGE_TORCH_STABLE_ABI=1
                                                     OPBRIDGE_TORCH_TARGET_VERSION="${OPBRIDGE_TORCH_TARGET_VERSION}")
  elseif(_stable_file)
    target_compile_definitions(${name}_torch PRIVATE OPBRIDGE_TORCH_STABLE_LIBRARY_FILE="${_stable_file}"
                                                     OPBRIDGE_TORCH_TARGET_VERSION="${OPBRIDGE_TORCH_TARGET_VERSION}")
  endif()
  add_dependencies(${name}_torch ${_libraries})
  set(${out_var} ${name}_torch ${_libraries} PARENT_SCOPE)
endfunction()

# One PyTorch library: lib<file>_kernels.so (<target>_kernels), the SDK's
# torch part (torch, torch_cuda or torch_stable) and the library's own
# objects, which the extension module loads; and lib<file>.so (<target>),
# which needs it and registers its operators when loaded
# (torch_adapter/autoregister.cpp), for torch.ops.load_library and C++ hosts.
function(_opbridge_torch_library name target part file objects)
  add_library(${target} SHARED "${OPBRIDGE_SDK_CSRC}/torch_adapter/autoregister.cpp")
  set_target_properties(
    ${target} PROPERTIES OUTPUT_NAME "${file}" CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                         INSTALL_RPATH "$ORIGIN" LINK_DEPENDS "${OPBRIDGE_SDK_CSRC}/torch_adapter/exports.map")
  target_compile_features(${target} PRIVATE cxx_std_17)
  target_include_directories(${target} PRIVATE "${OPBRIDGE_SDK_CSRC}")
  target_compile_definitions(${target} PRIVATE OPBRIDGE_TORCH_KERNELS_FILE="lib${file}_kernels.so")
  target_compile_options(${target} PRIVATE ${OPBRIDGE_COMPILE_WARNINGS})
  # It calls its kernels library through dlsym only: kept needed all the same.
  target_link_options(${target} PRIVATE "-Wl,--no-as-needed" "-Wl,--no-undefined"
                      "-Wl,--version-script=${OPBRIDGE_SDK_CSRC}/torch_adapter/exports.map")
  target_link_libraries(${target} PRIVATE ${target}_kernels ${CMAKE_DL_LIBS})
  set(target ${target}_kernels)
  set(file ${file}_kernels)
  _opbridge_sdk_objects(${part} _sdk_torch)
  add_library(${target} SHARED ${_sdk_torch} ${objects})
  set_target_properties(
    ${target} PROPERTIES OUTPUT_NAME "${file}" CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                         LINK_DEPENDS "${OPBRIDGE_SDK_CSRC}/torch_adapter/exports.map")
  # Objects only: compiled by <name>_core and the SDK's torch part.
  target_link_libraries(${target} PRIVATE ${name}_core torch)
  # Exports only torch_library.h's and interface.h's C entry points; links
  # no libpython (--no-undefined: a Python symbol would fail the link).
  target_link_options(${target} PRIVATE "-Wl,--no-undefined"
                      "-Wl,--version-script=${OPBRIDGE_SDK_CSRC}/torch_adapter/exports.map")
  if(part STREQUAL "torch_stable")
    # Only the libraries that hold the stable C shims end up needed.
    target_link_options(${target} PRIVATE "-Wl,--as-needed")
  elseif(OPBRIDGE_TORCH_LIBGOMP)
    target_link_libraries(${target} PRIVATE "${OPBRIDGE_TORCH_LIBGOMP}")
  endif()
  # Installed beside the torch wheel's libraries (site-packages/torch/lib).
  set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/../torch/lib")
endfunction()

# OpenVINO's CMake package, once per project: OpenVINO_DIR when set, else
# the one the openvino Python package ships. Sets OPBRIDGE_OPENVINO_FOUND
# (the targets must be imported in this directory or above).
macro(_opbridge_find_openvino)
  if(NOT TARGET openvino::runtime)
    if(NOT OpenVINO_DIR)
      find_package(Python3 QUIET COMPONENTS Interpreter)
      if(Python3_Interpreter_FOUND)
        execute_process(
          COMMAND "${Python3_EXECUTABLE}" -c "import openvino.utils as u; print(u.get_cmake_path())"
          OUTPUT_VARIABLE _opbridge_openvino_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
          RESULT_VARIABLE _opbridge_openvino_status)
        if(_opbridge_openvino_status EQUAL 0 AND EXISTS "${_opbridge_openvino_dir}/OpenVINOConfig.cmake")
          set(OpenVINO_DIR "${_opbridge_openvino_dir}" CACHE PATH "OpenVINO's CMake package")
        endif()
      endif()
    endif()
    find_package(OpenVINO QUIET COMPONENTS Runtime Threading ONNX)
    if(TARGET openvino::runtime)
      message(STATUS "opbridge: OpenVINO ${OpenVINO_VERSION} found (${OpenVINO_DIR})")
    endif()
  endif()
  if(TARGET openvino::runtime AND TARGET openvino::threading AND TARGET openvino::frontend::onnx)
    set(OPBRIDGE_OPENVINO_FOUND TRUE)
  else()
    set(OPBRIDGE_OPENVINO_FOUND FALSE)
  endif()
endmacro()

# OpenVINO: <name>_openvino, an extension library (openvino_adapter/); skipped
# without OpenVINO.
function(_opbridge_adapter_openvino name out_var)
  set(${out_var} "" PARENT_SCOPE)
  _opbridge_find_openvino()
  if(NOT OPBRIDGE_OPENVINO_FOUND)
    message(STATUS "opbridge: OpenVINO's CMake package not found (set OpenVINO_DIR, or install the openvino "
                   "Python package): lib${name}_openvino.so is not built")
    return()
  endif()
  _opbridge_sdk_objects(openvino _sdk_openvino)
  _opbridge_library_objects(${name} _objects)
  add_library(${name}_openvino SHARED ${_sdk_openvino} ${_objects})
  set_target_properties(
    ${name}_openvino PROPERTIES OUTPUT_NAME "${name}_openvino" CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
                                LINK_DEPENDS "${OPBRIDGE_SDK_CSRC}/openvino_adapter/exports.map")
  # openvino::threading: what openvino/core/parallel.hpp needs (TBB, as OpenVINO itself is built).
  target_link_libraries(${name}_openvino PRIVATE ${name}_core openvino::runtime openvino::threading
                                                 openvino::frontend::onnx)
  target_compile_options(${name}_openvino PRIVATE ${OPBRIDGE_COMPILE_WARNINGS})
  target_link_options(${name}_openvino PRIVATE "-Wl,--no-undefined" "-Wl,--exclude-libs,ALL"
                      "-Wl,--version-script=${OPBRIDGE_SDK_CSRC}/openvino_adapter/exports.map")
  # OpenVINO has loaded its libraries before it loads an extension; the rpath
  # (the openvino wheel beside this package) serves tools like ldd.
  set_target_properties(${name}_openvino PROPERTIES INSTALL_RPATH "$ORIGIN/../openvino/libs")
  set(${out_var} ${name}_openvino PARENT_SCOPE)
endfunction()

function(opbridge_add_operator_library name)
  cmake_parse_arguments(
    PARSE_ARGV 1 ARG ""
    "TORCH_NAMESPACE;ONNX_DOMAIN;DOMAIN_VERSION;VERSION;TORCH_MODULE_NAME;TORCH_LIBRARY_NAME;ORT_LIBRARY_NAME;INSTALL_DESTINATION"
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
  if(NOT ARG_TORCH_MODULE_NAME)
    set(ARG_TORCH_MODULE_NAME "${name}_torch")
  endif()
  if(NOT ARG_ORT_LIBRARY_NAME)
    set(ARG_ORT_LIBRARY_NAME "${name}_ort")
  endif()
  if(NOT ARG_TORCH_LIBRARY_NAME)
    set(ARG_TORCH_LIBRARY_NAME "${name}_torch")
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
