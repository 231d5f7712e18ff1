# The ONNX Runtime adapter: <name>_ort (lib<ORT_LIBRARY_NAME>.so), an ONNX
# Runtime custom-op library for the domain; it exports RegisterCustomOps and
# OpbridgeLibraryInfo / OpbridgeDomainVersion (ort_adapter/library_info.h,
# what it implements, for C++ hosts) and links no libonnxruntime. Built by
# default; needs ONNX Runtime's C/C++ headers in OPBRIDGE_ORT_INCLUDE_DIR.
include_guard(GLOBAL)
set_property(GLOBAL APPEND PROPERTY OPBRIDGE_ADAPTERS ort)

# opbridge's own library is always built with it.
function(_opbridge_own_adapter_ort out_var)
  set(${out_var} TRUE PARENT_SCOPE)
endfunction()

# The SDK's ort part: the adapter's code, the same for every library.
function(_opbridge_sdk_part_ort target)
  file(GLOB _sources CONFIGURE_DEPENDS "${OPBRIDGE_SDK_CSRC}/ort_adapter/*.cpp")
  add_library(${target} OBJECT ${_sources})
  target_include_directories(${target} SYSTEM PRIVATE "${OPBRIDGE_ORT_INCLUDE_DIR}")
endfunction()

function(_opbridge_adapter_ort name out_var)
  if(NOT EXISTS "${OPBRIDGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h")
    message(FATAL_ERROR "ONNX Runtime headers not found in '${OPBRIDGE_ORT_INCLUDE_DIR}' (OPBRIDGE_ORT_INCLUDE_DIR)")
  endif()
  file(STRINGS "${OPBRIDGE_ORT_INCLUDE_DIR}/onnxruntime_c_api.h" _api REGEX "^#define ORT_API_VERSION [0-9]+")
  _opbridge_sdk_objects(ort _sdk_ort "${_api}")
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
