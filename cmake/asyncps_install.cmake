# The installed package: `cmake --install <build> --prefix P` lays out
#
#   P/include/asyncps/*.h                    the public headers (the only ones a program names)
#   P/include/asyncps/internal/<folder>/*.h  the tree's headers the public ones reach, computed
#                                            at install time from the compiler's own include
#                                            list, their includes rewritten to
#                                            "asyncps/internal/<folder>/..."
#                                            (cmake/asyncps_install_headers.cmake)
#   P/lib/libasyncps_*.a                     the static libraries behind the public API
#   P/lib/cmake/asyncps/                     asyncpsConfig.cmake: find_package(asyncps), targets
#                                            asyncps::asyncps (and asyncps::torch, COMPONENTS torch)
#   P/bin/asyncps_ps, P/bin/asyncps_launch   the generic PS and the local-cluster launcher
#                                            (imported as asyncps::asyncps_ps, ::asyncps_launch)
#
# scripts/check_install.sh installs into a scratch prefix and builds and runs
# examples/installed/ against it.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ASYNCPS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/asyncps)

# The front door as one target: asyncps::asyncps for a program that finds the installed
# package, and the same name in this tree.
add_library(asyncps_api INTERFACE)
add_library(asyncps::asyncps ALIAS asyncps_api)
set_target_properties(asyncps_api PROPERTIES EXPORT_NAME asyncps)
target_link_libraries(asyncps_api INTERFACE asyncps_coordinator)
target_include_directories(asyncps_api INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
# Every library carries the installed include root (core is under all of them).
target_include_directories(asyncps_core INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

# The static libraries of the public API and everything they link (the export set must be
# closed under linking), installed as asyncps::<folder>.
set(ASYNCPS_EXPORTED_LIBS
  asyncps_core asyncps_data asyncps_metrics asyncps_net asyncps_partitioners
  asyncps_checkpoint asyncps_update_rules asyncps_ps_base asyncps_ps_replication asyncps_ps asyncps_data_service
  asyncps_worker asyncps_coordinator)
foreach(lib IN LISTS ASYNCPS_EXPORTED_LIBS)
  string(REGEX REPLACE "^asyncps_" "" export_name ${lib})
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
install(TARGETS ${ASYNCPS_EXPORTED_LIBS} asyncps_api EXPORT asyncpsTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT asyncpsTargets NAMESPACE asyncps:: DESTINATION ${ASYNCPS_INSTALL_CMAKEDIR})

set(ASYNCPS_PUBLIC_HEADER_EXCLUDES)
if(ASYNCPS_HAVE_TORCH)
  # A separate export set: only a program that asks for COMPONENTS torch pays for finding
  # LibTorch.
  set_target_properties(asyncps_torch PROPERTIES EXPORT_NAME torch)
  install(TARGETS asyncps_torch EXPORT asyncpsTorchTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(EXPORT asyncpsTorchTargets NAMESPACE asyncps:: DESTINATION ${ASYNCPS_INSTALL_CMAKEDIR})
else()
  set(ASYNCPS_PUBLIC_HEADER_EXCLUDES torch.h)
endif()

# Public headers and the internal headers they reach, computed by the compiler when installing
# (so the set can be neither stale nor a guess), their includes rewritten to
# "asyncps/internal/...".
install(CODE "
  set(ASYNCPS_CXX_COMPILER \"${CMAKE_CXX_COMPILER}\")
  set(ASYNCPS_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(ASYNCPS_STAGING_DIR \"${PROJECT_BINARY_DIR}/install-headers\")
  set(ASYNCPS_PUBLIC_HEADER_EXCLUDES \"${ASYNCPS_PUBLIC_HEADER_EXCLUDES}\")
  set(ASYNCPS_INCLUDE_DESTINATION \"${CMAKE_INSTALL_INCLUDEDIR}\")
")
install(SCRIPT cmake/asyncps_install_headers.cmake)

# The process binaries a cluster runs besides the user's program, also as imported targets
# (asyncps::asyncps_ps, asyncps::asyncps_launch) for a program's custom commands and tests.
set_target_properties(asyncps_ps_main PROPERTIES EXPORT_NAME asyncps_ps)
install(TARGETS asyncps_ps_main asyncps_launch EXPORT asyncpsTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

configure_package_config_file(cmake/asyncpsConfig.cmake.in
  ${PROJECT_BINARY_DIR}/asyncpsConfig.cmake
  INSTALL_DESTINATION ${ASYNCPS_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/asyncpsConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/asyncpsConfig.cmake ${PROJECT_BINARY_DIR}/asyncpsConfigVersion.cmake
        DESTINATION ${ASYNCPS_INSTALL_CMAKEDIR})
