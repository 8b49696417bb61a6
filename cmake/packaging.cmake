# Debian package of npo-hal, built by CPack from a build tree (docs/packaging.md):
#   cpack -G DEB -B DIR --config <build>/CPackConfig.cmake
# One package, npo-hal: the libraries, headers, CMake and pkg-config files, the tools, the
# systemd units, the sysusers.d file, udev rules, alert rules and the Grafana dashboard.
# Its version is project()'s (the single version source). Included at the end of the top-level
# CMakeLists.txt, after every install rule.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME npo-hal)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "npo-hal")
set(CPACK_PACKAGE_CONTACT "npo-hal maintainers <npo-hal@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "NPO accelerator HAL: userspace driver and emulator
 C++23 userspace driver and hardware abstraction layer for optical-linked AI
 accelerator cards (VFIO), with a register-level emulator of the reference card,
 the npo-emud shared emulated supernode, npo-smi, npo-link, npo-exporter and the
 systemd units of the daemons (run as user npo).")
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# dpkg-shlibdeps resolves the package's own libraries from the staging tree.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# adduser: the postinst's fallback where systemd-sysusers is missing (a container).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
configure_file(${CMAKE_CURRENT_LIST_DIR}/packaging/postinst ${PROJECT_BINARY_DIR}/deb/postinst COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${PROJECT_BINARY_DIR}/deb/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
