# Install-time script (cmake/asyncps_install.cmake runs it): installs the public headers to
# ${ASYNCPS_INCLUDE_DESTINATION}/asyncps/ and the tree's headers they reach to
# ${ASYNCPS_INCLUDE_DESTINATION}/asyncps/internal/<path in the tree>.
#
# The set is what the compiler itself reads: `-MM` over each public header with only the source
# root and include/ on the include path. Nothing is listed by hand, so a header that a public
# header starts to include is installed with it. A public header that reaches a header outside
# the tree's folders (a generated Cap'n Proto header lives in the build tree) fails the install:
# a user program must not need them.
#
# Installed copies include each other as "asyncps/internal/core/tensor.h" (rewritten from the
# tree's "core/tensor.h"), so a program needs only <prefix>/include on its include path and
# none of its own headers can shadow ours.
#
# Inputs (set by install(CODE)): ASYNCPS_CXX_COMPILER, ASYNCPS_SOURCE_DIR, ASYNCPS_STAGING_DIR
# (scratch space in the build tree), ASYNCPS_PUBLIC_HEADER_EXCLUDES (file names in
# include/asyncps/ not installed), ASYNCPS_INCLUDE_DESTINATION (relative to the prefix).

file(GLOB public_headers RELATIVE "${ASYNCPS_SOURCE_DIR}/include/asyncps"
     "${ASYNCPS_SOURCE_DIR}/include/asyncps/*.h")
if(ASYNCPS_PUBLIC_HEADER_EXCLUDES)
  list(REMOVE_ITEM public_headers ${ASYNCPS_PUBLIC_HEADER_EXCLUDES})
endif()

# Tree-relative paths: "include/asyncps/strategy.h", "core/tensor.h", ...
set(installed)
foreach(header IN LISTS public_headers)
  execute_process(
    COMMAND "${ASYNCPS_CXX_COMPILER}" -std=c++20 -MM -MT dep
            -I "${ASYNCPS_SOURCE_DIR}" -I "${ASYNCPS_SOURCE_DIR}/include"
            -x c++ "${ASYNCPS_SOURCE_DIR}/include/asyncps/${header}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "asyncps install: include/asyncps/${header} does not preprocess with only "
                        "the source tree on the include path (does it reach a generated header?):\n${err}")
  endif()
  string(REGEX REPLACE "^dep:" "" deps "${deps}")
  string(REPLACE "\\\n" " " deps "${deps}")
  separate_arguments(deps UNIX_COMMAND "${deps}")
  foreach(dep IN LISTS deps)
    file(REAL_PATH "${dep}" dep BASE_DIRECTORY "${ASYNCPS_SOURCE_DIR}")
    file(RELATIVE_PATH rel "${ASYNCPS_SOURCE_DIR}" "${dep}")
    if(NOT rel MATCHES "^(include/asyncps|[a-z_]+(/[a-z_]+)*)/[a-z0-9_]+\\.h$")
      message(FATAL_ERROR "asyncps install: include/asyncps/${header} reaches ${dep}, which is not "
                          "a header of one of the tree's folders")
    endif()
    list(APPEND installed "${rel}")
  endforeach()
endforeach()
list(REMOVE_DUPLICATES installed)
list(SORT installed)

# The tree's folders that installed headers come from: the includes to rewrite.
set(folders)
foreach(rel IN LISTS installed)
  if(NOT rel MATCHES "^include/")
    string(REGEX REPLACE "/.*" "" folder "${rel}")
    list(APPEND folders "${folder}")
  endif()
endforeach()
list(REMOVE_DUPLICATES folders)
list(JOIN folders "|" folders)

# Stage rewritten copies, then install them (file(INSTALL) records them in the manifest and
# honours DESTDIR).
file(REMOVE_RECURSE "${ASYNCPS_STAGING_DIR}")
set(internal_count 0)
foreach(rel IN LISTS installed)
  file(READ "${ASYNCPS_SOURCE_DIR}/${rel}" text)
  # Only quoted includes of those folders; "asyncps/..." (public), "absl/..." and <...> stay.
  string(REGEX REPLACE "(\n[ \t]*#[ \t]*include[ \t]+\")((${folders})/([a-z_]+/)*[a-z0-9_]+\\.h\")"
         "\\1asyncps/internal/\\2" text "\n${text}")
  string(REGEX REPLACE "^\n" "" text "${text}")
  if(rel MATCHES "^include/(.*)$")
    set(staged "${CMAKE_MATCH_1}")
  else()
    set(staged "asyncps/internal/${rel}")
    math(EXPR internal_count "${internal_count} + 1")
  endif()
  file(WRITE "${ASYNCPS_STAGING_DIR}/${staged}" "${text}")
endforeach()
message(STATUS "asyncps: ${internal_count} internal headers reached by the public ones")
file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${ASYNCPS_INCLUDE_DESTINATION}"
     TYPE DIRECTORY FILES "${ASYNCPS_STAGING_DIR}/asyncps")
