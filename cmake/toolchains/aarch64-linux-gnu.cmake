# Cross build for arm64 (DGX Spark / GB10 hosts) on an amd64 Debian 12 machine, with Debian's
# multiarch: the compiler from crossbuild-essential-arm64, the libraries as NAME:arm64 packages
# under /usr/lib/aarch64-linux-gnu. deploy/cross-arm64.sh installs both and uses this file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Search the arm64 libraries only; programs (help2man, gzip, lintian) are the host's.
set(CMAKE_FIND_ROOT_PATH / ${TANDEM_ARM64_EXTRA_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")

# Tests run the arm64 programs under qemu-user; CMake prefixes executable tests with this, and
# scripts that start a program rely on the kernel's binfmt_misc entry for qemu-aarch64.
find_program(TANDEM_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(TANDEM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TANDEM_QEMU_AARCH64})
endif()


# The .debs name the target's architecture, not the build machine's that CPack would ask dpkg
# for (cmake/Packaging.cmake; tests/packaging checks the file names with it).
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
