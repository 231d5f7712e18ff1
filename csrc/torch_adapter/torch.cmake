# The PyTorch adapter: <name>_torch_library (lib<TORCH_LIBRARY_NAME>.so), the
# PyTorch library: every spec's op + backward with CPU/Meta/Autograd kernels,
# no Python in it; it registers them when opbridge_register_torch_operators()
# is called (torch_adapter/torch_library.h, for C++ hosts that link libtorch).
# And <name>_torch, the Python extension module over it: opbridge.load_library
# (path) imports it (which loads the library from beside it) and, once its
# namespace and ops are found free, has it register them. Built by default.
#
# Its keywords of opbridge_add_operator_library:
#     [TORCH_MODULE_NAME <module>]    the Python module               (default <name>_torch)
#     [TORCH_LIBRARY_NAME <lib>]      lib<lib>.so for PyTorch         (default <name>_torch)
include_guard(GLOBAL)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_ADAPTERS torch)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_ADAPTER_KEYWORDS TORCH_MODULE_NAME TORCH_LIBRARY_NAME)

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

# opbridge's own library: with OPBRIDGE_BUILD_TORCH, which the sanitizer
# builds turn off (torch's libraries are not instrumented).
function(_opbridge_own_adapter_torch out_var)
  option(OPBRIDGE_BUILD_TORCH "Build the PyTorch library libopbridge_torch.so and the extension opbridge._C" ON)
  if(OPBRIDGE_BUILD_TORCH AND OPBRIDGE_SANITIZE)
    message(FATAL_ERROR "OPBRIDGE_SANITIZE builds the kernel core, the ONNX Runtime library and the "
                        "C++ tests; set OPBRIDGE_BUILD_TORCH=OFF")
  endif()
  set(${out_var} ${OPBRIDGE_BUILD_TORCH} PARENT_SCOPE)
endfunction()

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
  if(NOT ARG_TORCH_MODULE_NAME)
    set(ARG_TORCH_MODULE_NAME "${name}_torch")
  endif()
  if(NOT ARG_TORCH_LIBRARY_NAME)
    set(ARG_TORCH_LIBRARY_NAME "${name}_torch")
  endif()

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
  _opbridge_sdk_objects(${part} _sdk_torch "torch ${OPBRIDGE_TORCH_VERSION}"
                        "target ${OPBRIDGE_TORCH_TARGET_VERSION}")
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
