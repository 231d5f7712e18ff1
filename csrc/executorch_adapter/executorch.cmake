# The ExecuTorch adapter: <name>_executorch (lib<name>_executorch.so), the
# library's out= kernels for the ExecuTorch runtime (kernels.cpp). Built with
# ADAPTERS executorch (opbridge's own: -DOPBRIDGE_BUILD_EXECUTORCH=ON, as
# ./dev builds it), against the executorch wheel of the Python that runs the
# build (requirements-nodeps.txt): its
# headers (executorch/include) and its runtime, the pybindings module
# _portable_lib, whose kernel registry the library registers into. Linked
# against that module by file name, found through the RUNPATH beside the
# executorch package, so the loader maps the module a Python process has
# already imported, not a second copy with a registry of its own.
include_guard(GLOBAL)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_OPT_IN_ADAPTERS executorch)

# opbridge's own library: with OPBRIDGE_BUILD_EXECUTORCH, but for the
# sanitizer builds (ExecuTorch's runtime is not instrumented).
function(_opbridge_own_adapter_executorch out_var)
  option(OPBRIDGE_BUILD_EXECUTORCH "Build the ExecuTorch kernel library (needs the executorch package; ./dev builds it)"
         OFF)
  if(OPBRIDGE_BUILD_EXECUTORCH AND NOT OPBRIDGE_SANITIZE)
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
endfunction()

macro(_opbridge_find_executorch)
  if(NOT OPBRIDGE_EXECUTORCH_DIR)
    find_package(Python3 REQUIRED COMPONENTS Interpreter)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import importlib.util, sysconfig; s = importlib.util.find_spec('executorch'); print(s.submodule_search_locations[0]); print(sysconfig.get_config_var('EXT_SUFFIX'))"
      OUTPUT_VARIABLE _opbridge_executorch_found OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _opbridge_executorch_status ERROR_QUIET)
    if(NOT _opbridge_executorch_status EQUAL 0)
      message(FATAL_ERROR "OPBRIDGE_BUILD_EXECUTORCH=ON: the executorch package is not installed for "
                          "${Python3_EXECUTABLE} (requirements-nodeps.txt, installed with --no-deps; ./dev setup)")
    endif()
    string(REPLACE "\n" ";" _opbridge_executorch_found "${_opbridge_executorch_found}")
    list(GET _opbridge_executorch_found 0 _opbridge_executorch_dir)
    list(GET _opbridge_executorch_found 1 _opbridge_ext_suffix)
    set(OPBRIDGE_EXECUTORCH_DIR "${_opbridge_executorch_dir}" CACHE PATH "The installed executorch package")
    set(OPBRIDGE_EXECUTORCH_RUNTIME "_portable_lib${_opbridge_ext_suffix}" CACHE STRING
        "The file name of ExecuTorch's pybindings module")
  endif()
  foreach(_file IN ITEMS "include/executorch/runtime/kernel/operator_registry.h"
                         "extension/pybindings/${OPBRIDGE_EXECUTORCH_RUNTIME}")
    if(NOT EXISTS "${OPBRIDGE_EXECUTORCH_DIR}/${_file}")
      message(FATAL_ERROR "OPBRIDGE_BUILD_EXECUTORCH=ON: ${OPBRIDGE_EXECUTORCH_DIR}/${_file} not found (the "
                          "executorch wheel ships its runtime headers and its pybindings module there)")
    endif()
  endforeach()
endmacro()

function(_opbridge_adapter_executorch name out_var)
  _opbridge_find_executorch()
  set(_here "${OPBRIDGE_SDK_CSRC}/executorch_adapter")
  set(_pybindings "${OPBRIDGE_EXECUTORCH_DIR}/extension/pybindings")
  file(GLOB _sdk_executorch CONFIGURE_DEPENDS "${_here}/*.cpp")
  _opbridge_library_objects(${name} _objects)
  add_library(${name}_executorch SHARED ${_sdk_executorch} ${_objects})
  set_target_properties(${name}_executorch PROPERTIES OUTPUT_NAME "${name}_executorch" CXX_VISIBILITY_PRESET hidden
                                                      VISIBILITY_INLINES_HIDDEN ON LINK_DEPENDS "${_here}/exports.map")
  # The runtime's headers include c10's portable subset from beside them.
  target_include_directories(
    ${name}_executorch SYSTEM PRIVATE "${OPBRIDGE_EXECUTORCH_DIR}/include"
    "${OPBRIDGE_EXECUTORCH_DIR}/include/executorch/runtime/core/portable_type/c10")
  # The wheel's runtime does not export its logging: ExecuTorch's
  # header-inline logging is compiled out. Its threadpool's parallel_for is
  # exported. c10's portable subset without its CMake-generated macros, as
  # ExecuTorch builds it.
  target_compile_definitions(${name}_executorch PRIVATE ET_LOG_ENABLED=0 ET_USE_THREADPOOL=1
                                                         C10_USING_CUSTOM_GENERATED_MACROS)
  # The release built against (executorch/version.py, read without importing
  # the package), for opbridge_executorch_built_with().
  file(STRINGS "${OPBRIDGE_EXECUTORCH_DIR}/version.py" _version_line REGEX "^__version__ = ")
  string(REGEX REPLACE "^__version__ = [\"']([^\"']+)[\"'].*" "\\1" _version "${_version_line}")
  if(NOT _version OR _version STREQUAL _version_line)
    message(FATAL_ERROR "OPBRIDGE_BUILD_EXECUTORCH=ON: no __version__ in ${OPBRIDGE_EXECUTORCH_DIR}/version.py")
  endif()
  target_compile_definitions(${name}_executorch PRIVATE OPBRIDGE_EXECUTORCH_BUILT_WITH="${_version}")
  target_link_libraries(${name}_executorch PRIVATE ${name}_core "-L${_pybindings}" "-l:${OPBRIDGE_EXECUTORCH_RUNTIME}")
  target_compile_options(${name}_executorch PRIVATE ${OPBRIDGE_COMPILE_WARNINGS})
  # -l:<file name>: DT_NEEDED names the module by file name (it has no
  # SONAME), not by this machine's path. --no-undefined: every ExecuTorch
  # symbol the kernels use must resolve into the module.
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"
    OUTPUT_VARIABLE _torch_lib OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  target_link_options(
    ${name}_executorch PRIVATE "-Wl,--no-undefined"
    "-Wl,--exclude-libs,ALL" "-Wl,--version-script=${_here}/exports.map" "-Wl,-rpath-link,${_torch_lib}"
    "-Wl,-rpath-link,${OPBRIDGE_EXECUTORCH_DIR}/backends/qualcomm")
  set_target_properties(${name}_executorch PROPERTIES BUILD_RPATH "${_pybindings}"
                                                      INSTALL_RPATH "$ORIGIN/../executorch/extension/pybindings")
  set(${out_var} ${name}_executorch PARENT_SCOPE)
endfunction()

