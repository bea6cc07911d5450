# Cross build for aarch64 Linux with Debian's cross gcc; tests run under
# qemu-user, so `ctest` is the same command as on the host:
#   cmake -B build-arm -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DPE_BUILD_BENCH=OFF
#   cmake --build build-arm && ctest --test-dir build-arm
# Needs gcc-aarch64-linux-gnu, qemu-user and the :arm64 -dev packages
# (libsleef, libhwloc, libcmocka, libcjson) installed through multiarch.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Multiarch: arm64 headers and libraries live beside the host's under /usr.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config must see only the arm64 .pc files (and the arch-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")

# ctest runs every test binary through qemu with the arm64 loader and libc of
# Debian's multiarch packages (libc6:arm64, under /), where the arm64 SLEEF,
# hwloc and cmocka live too. Not the cross toolchain's own libc
# (-L /usr/aarch64-linux-gnu): its older glibc (2.36-8cross1) hangs in the
# first pthread_create under qemu-user 7.2 on this kernel, so every test that
# starts a thread pool never returned.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
