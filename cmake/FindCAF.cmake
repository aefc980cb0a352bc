# FindCAF.cmake: locate the C++ Actor Framework (CAF) 0.17 as packaged by Debian.
#
# Debian's libcaf-dev installs headers and libraries but no CMake config and
# no pkg-config file, so this module finds them and defines imported targets
# with the names that CAF >= 0.18 exports itself (CAF::core, CAF::io,
# CAF::openssl); target_link_libraries lines survive an upgrade unchanged.
#
#   find_package(CAF 0.17 REQUIRED COMPONENTS core io openssl)
#
# Result variables: CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR, CAF_LIBRARIES,
# CAF_<comp>_FOUND, CAF_<comp>_LIBRARY.

find_path(CAF_INCLUDE_DIR NAMES caf/config.hpp caf/all.hpp)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_ver_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX MATCH "[0-9]+$" _caf_ver_int "${_caf_ver_line}")
  math(EXPR _caf_major "${_caf_ver_int} / 10000")
  math(EXPR _caf_minor "(${_caf_ver_int} / 100) % 100")
  math(EXPR _caf_patch "${_caf_ver_int} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

if(NOT CAF_FIND_COMPONENTS)
  set(CAF_FIND_COMPONENTS core)
endif()

find_package(Threads QUIET)

set(CAF_LIBRARIES "")
foreach(_comp IN LISTS CAF_FIND_COMPONENTS)
  find_library(CAF_${_comp}_LIBRARY NAMES caf_${_comp})
  if(CAF_${_comp}_LIBRARY AND CAF_INCLUDE_DIR)
    set(CAF_${_comp}_FOUND TRUE)
    list(APPEND CAF_LIBRARIES "${CAF_${_comp}_LIBRARY}")
    if(NOT TARGET CAF::${_comp})
      add_library(CAF::${_comp} SHARED IMPORTED)
      set_target_properties(CAF::${_comp} PROPERTIES
        IMPORTED_LOCATION "${CAF_${_comp}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
      if(_comp STREQUAL "core")
        set_property(TARGET CAF::core APPEND PROPERTY
                     INTERFACE_LINK_LIBRARIES Threads::Threads)
      else()
        set_property(TARGET CAF::${_comp} APPEND PROPERTY
                     INTERFACE_LINK_LIBRARIES CAF::core)
      endif()
      if(_comp STREQUAL "openssl")
        set_property(TARGET CAF::openssl APPEND PROPERTY
                     INTERFACE_LINK_LIBRARIES CAF::io)
      endif()
    endif()
  else()
    set(CAF_${_comp}_FOUND FALSE)
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_LIBRARIES
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)
mark_as_advanced(CAF_INCLUDE_DIR)
