# The OpenVINO adapter: <name>_openvino (lib<name>_openvino.so), an OpenVINO
# extension library (core.add_extension): the ONNX frontend's conversion of
# the domain's nodes and the ops an IR of them reads back with. Built by
# default, where OpenVINO's CMake package is found (OpenVINO_DIR, else the
# openvino Python package's); skipped with a message otherwise.
include_guard(GLOBAL)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_ADAPTERS openvino)

# opbridge's own library: with OPBRIDGE_BUILD_OPENVINO. The sanitizer builds
# leave it out (OpenVINO's own libraries are not instrumented), but for the
# fuzz build, whose OpenVINO target instruments the extension's code.
function(_opbridge_own_adapter_openvino out_var)
  option(OPBRIDGE_BUILD_OPENVINO "Build the OpenVINO extension library (where OpenVINO's CMake package is found)" ON)
  if(OPBRIDGE_BUILD_OPENVINO AND (NOT OPBRIDGE_SANITIZE OR OPBRIDGE_BUILD_FUZZ))
    set(${out_var} TRUE PARENT_SCOPE)
  else()
    set(${out_var} FALSE PARENT_SCOPE)
  endif()
endfunction()

function(_opbridge_sdk_part_openvino target)
  file(GLOB _sources CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/openvino_adapter/*.cpp")
  add_library(${target} OBJECT ${_sources})
  target_link_libraries(${target} PRIVATE openvino::runtime openvino::threading openvino::frontend::onnx)
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

function(_opbridge_adapter_openvino name out_var)
  set(${out_var} "" PARENT_SCOPE)
  _opbridge_find_openvino()
  if(NOT OPBRIDGE_OPENVINO_FOUND)
    message(STATUS "opbridge: OpenVINO's CMake package not found (set OpenVINO_DIR, or install the openvino "
                   "Python package): lib${name}_openvino.so is not built")
    return()
  endif()
  _opbridge_sdk_objects(openvino _sdk_openvino "openvino ${OpenVINO_VERSION}")
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
