# install.cmake: install rules and the CMake package (find_package(hvactor)).
#
# Included at the end of the top-level CMakeLists.txt, after every target is
# defined. Installs:
#   include/hvactor/...                      public headers of every layer
#   lib/libhvactor_*.so                      the libraries (export set hvactorTargets)
#   bin/hvactor-node, bin/hvactor-run        the tools, when they are built
#   lib/cmake/hvactor/                       hvactorConfig.cmake, version file,
#                                            hvactorTargets.cmake, FindCAF.cmake
#
# Users write:
#   find_package(hvactor REQUIRED)
#   target_link_libraries(app PRIVATE hvactor::hvactor)   # or one floor: hvactor::base ... hvactor::train

include(CMakePackageConfigHelpers)

set(HVACTOR_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/hvactor"
    CACHE STRING "Where hvactorConfig.cmake and friends are installed (relative to the prefix)")
mark_as_advanced(HVACTOR_INSTALL_CMAKEDIR)

# --- public headers ---------------------------------------------------------
# Each layer keeps its public headers under <layer>/hvactor/; they all merge
# into <prefix>/include/hvactor/.
foreach(_hv_layer IN ITEMS base collectives actors driver train tune)
  if(IS_DIRECTORY "${PROJECT_SOURCE_DIR}/${_hv_layer}/hvactor")
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/${_hv_layer}/hvactor"
            DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
            COMPONENT hvactor_development
            FILES_MATCHING PATTERN "*.hpp")
  endif()
endforeach()

# --- libraries ----------------------------------------------------------------
# Target name -> exported name (hvactor::<exported name>).
set(_hv_export_names
  hvactor_base=base
  hvactor_collectives=collectives
  hvactor_actors=actors
  hvactor_driver=driver
  hvactor_train=train
  hvactor_tune=tune
  hvactor=hvactor)

# RPATH of installed binaries: libraries find each other next to themselves,
# tools find the libraries in ../<libdir>.
file(RELATIVE_PATH _hv_bin_to_lib "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")

set(_hv_lib_targets "")
foreach(_hv_pair IN LISTS _hv_export_names)
  string(REPLACE "=" ";" _hv_pair "${_hv_pair}")
  list(GET _hv_pair 0 _hv_tgt)
  list(GET _hv_pair 1 _hv_name)
  if(NOT TARGET ${_hv_tgt})
    continue()
  endif()
  list(APPEND _hv_lib_targets ${_hv_tgt})
  set_target_properties(${_hv_tgt} PROPERTIES EXPORT_NAME ${_hv_name})
  get_target_property(_hv_type ${_hv_tgt} TYPE)
  if(NOT _hv_type STREQUAL "INTERFACE_LIBRARY")
    set_property(TARGET ${_hv_tgt} APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
  endif()
endforeach()

install(TARGETS ${_hv_lib_targets}
  EXPORT hvactorTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
    COMPONENT hvactor_runtime
    NAMELINK_COMPONENT hvactor_development
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT hvactor_development
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT hvactor_runtime
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

# --- tools --------------------------------------------------------------------
foreach(_hv_tool IN ITEMS hvactor-node hvactor-run)
  if(TARGET ${_hv_tool})
    set_property(TARGET ${_hv_tool} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${_hv_bin_to_lib}")
    install(TARGETS ${_hv_tool}
            RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT hvactor_runtime)
  endif()
endforeach()

# --- the LibTorch adapter ------------------------------------------------------
# find_package(hvactor COMPONENTS torch) gives hvactor::torch: its headers,
# its library and an export set of its own (hvactorTorchTargets.cmake), which
# the package config loads only when the component is asked for, after
# finding the LibTorch it was built against (find_dependency(Torch)).
set(HVACTOR_CONFIG_TORCH_DIR "")
if(TARGET hvactor_torch)
  set_property(TARGET hvactor_torch APPEND PROPERTY INSTALL_RPATH "$ORIGIN")
  set_target_properties(hvactor_torch PROPERTIES EXPORT_NAME torch)
  install(TARGETS hvactor_torch
          EXPORT hvactorTorchTargets
          LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
            COMPONENT hvactor_runtime
            NAMELINK_COMPONENT hvactor_development
          INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/torch/hvactor"
          DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
          COMPONENT hvactor_development
          FILES_MATCHING PATTERN "*.hpp")
  install(EXPORT hvactorTorchTargets
          NAMESPACE hvactor::
          FILE hvactorTorchTargets.cmake
          DESTINATION "${HVACTOR_INSTALL_CMAKEDIR}"
          COMPONENT hvactor_development)
  set(HVACTOR_CONFIG_TORCH_DIR "${Torch_DIR}")
endif()
foreach(_hv_tool IN ITEMS hvactor-bench hvactor-up hvactor-down)
  if(TARGET ${_hv_tool})
    set_property(TARGET ${_hv_tool} APPEND PROPERTY INSTALL_RPATH "$ORIGIN/${_hv_bin_to_lib}")
  endif()
endforeach()
if(TARGET hvactor-bench-train)
  file(RELATIVE_PATH _hv_libexec_to_lib "${CMAKE_INSTALL_FULL_LIBEXECDIR}/hvactor"
       "${CMAKE_INSTALL_FULL_LIBDIR}")
  set_property(TARGET hvactor-bench-train APPEND PROPERTY INSTALL_RPATH
               "$ORIGIN/${_hv_libexec_to_lib}")
endif()

# --- package config -------------------------------------------------------------
# Dependencies beyond Threads/CAF/fmt that a consumer must resolve: only those
# the exported targets actually reference in their link interface (gloo from
# the collectives layer, CUDA::* when the CUDA path links publicly). Static
# libraries export their private dependencies too ($<LINK_ONLY:...>).
set(_hv_link_interface "")
foreach(_hv_tgt IN LISTS _hv_lib_targets)
  get_target_property(_hv_libs ${_hv_tgt} INTERFACE_LINK_LIBRARIES)
  if(_hv_libs)
    list(APPEND _hv_link_interface ${_hv_libs})
  endif()
  get_target_property(_hv_type ${_hv_tgt} TYPE)
  if(_hv_type STREQUAL "STATIC_LIBRARY")
    get_target_property(_hv_libs ${_hv_tgt} LINK_LIBRARIES)
    if(_hv_libs)
      list(APPEND _hv_link_interface ${_hv_libs})
    endif()
  endif()
endforeach()
set(HVACTOR_CONFIG_NEEDS_GLOO OFF)
if(_hv_link_interface MATCHES "(^|[;<:>])gloo(_cuda|_hip)?($|[;>])")
  set(HVACTOR_CONFIG_NEEDS_GLOO ON)
endif()
set(HVACTOR_CONFIG_NEEDS_CUDA OFF)
if(_hv_link_interface MATCHES "CUDA::")
  set(HVACTOR_CONFIG_NEEDS_CUDA ON)
endif()

install(EXPORT hvactorTargets
        NAMESPACE hvactor::
        FILE hvactorTargets.cmake
        DESTINATION "${HVACTOR_INSTALL_CMAKEDIR}"
        COMPONENT hvactor_development)

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/hvactorConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/hvactorConfig.cmake"
  INSTALL_DESTINATION "${HVACTOR_INSTALL_CMAKEDIR}")

write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/hvactorConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMajorVersion)

install(FILES
          "${PROJECT_BINARY_DIR}/hvactorConfig.cmake"
          "${PROJECT_BINARY_DIR}/hvactorConfigVersion.cmake"
          "${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake"
        DESTINATION "${HVACTOR_INSTALL_CMAKEDIR}"
        COMPONENT hvactor_development)

unset(_hv_layer)
unset(_hv_export_names)
unset(_hv_bin_to_lib)
unset(_hv_lib_targets)
unset(_hv_pair)
unset(_hv_tgt)
unset(_hv_name)
unset(_hv_type)
unset(_hv_tool)
unset(_hv_libs)
unset(_hv_link_interface)
