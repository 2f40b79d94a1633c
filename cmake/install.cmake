# `cmake --install build --prefix P`: the library, its public headers, the two programs and the
# package files for find_package(attnkit) and pkg-config; `make deb` packs the same with CPack.
include(CMakePackageConfigHelpers)

install(TARGETS attnkit EXPORT attnkitTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS attnkit_cli attnkit_spm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# include/attnkit holds the public headers only (the private ones live in src/); the web page is
# compiled into the library, so nothing else is needed at run time.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/attnkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/generated/attnkit/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnkit)

set(ATTNKIT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnkit)
install(EXPORT attnkitTargets NAMESPACE attnkit:: DESTINATION ${ATTNKIT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnkitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/attnkitConfig.cmake INSTALL_DESTINATION ${ATTNKIT_CMAKE_DIR})
# 0.x: a minor version may change the API, so a request for 0.2 takes any 0.2.z only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/attnkitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/attnkitConfig.cmake ${PROJECT_BINARY_DIR}/attnkitConfigVersion.cmake
  DESTINATION ${ATTNKIT_CMAKE_DIR})

# pkg-config: the static library and what it links (its users link its dependencies too), and
# LibTorch's two include directories. The prefix is found from the file's own place, so the file
# is right wherever `cmake --install --prefix` puts it.
file(RELATIVE_PATH ATTNKIT_PC_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(JOIN " " ATTNKIT_PC_TORCH_CFLAGS "-I$<JOIN:${TORCH_INCLUDE_DIRS}, -I>" "${TORCH_CXX_FLAGS}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/attnkit.pc.in ${PROJECT_BINARY_DIR}/attnkit.pc.in @ONLY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/attnkit.pc INPUT ${PROJECT_BINARY_DIR}/attnkit.pc.in)
install(FILES ${PROJECT_BINARY_DIR}/attnkit.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# `make deb`: a Debian package whose Depends dpkg-shlibdeps reads off the binaries.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME attnkit)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "attnkit developers <attnkit@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The headers and the static library need LibTorch's headers to be used; OpenBLAS is the BLAS
# attnkit is measured with (the reference BLAS makes LibTorch's products ~30x slower); the CJK
# font draws the pictures' Chinese labels.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libtorch-dev, libopenblas0-pthread")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "fonts-noto-cjk")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}
 The attnkit command (corpora, training, translation, evaluation, pictures, an HTTP server),
 its SentencePiece helper, and the attnkit C++ library with CMake and pkg-config files.")
include(CPack)
