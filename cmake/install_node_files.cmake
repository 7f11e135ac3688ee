# Runs at install time (`cmake --install`, and CPack for each package), when CMAKE_INSTALL_PREFIX is
# the prefix being installed to: cpack's /usr, or `cmake --install --prefix P`'s P. So the units name
# the tandemd that this very install puts down, whatever the prefix (deploy/systemd keeps the
# /usr/local paths that `tandemctl enroll` writes). Set by the install(CODE) that includes this:
#   TANDEM_UNIT_SOURCES  the unit files;  TANDEM_SBINDIR  sbin, relative to the prefix
#   TANDEM_ENV_SOURCE    the env file, installed only where none exists (an enrolled node keeps its own)
set(_prefix "${CMAKE_INSTALL_PREFIX}")
# Debian 12 keeps packaged units in /lib/systemd/system (usrmerge makes it /usr/lib/... too);
# elsewhere <prefix>/lib/systemd/system, which systemd also reads for /usr/local.
if(_prefix STREQUAL "/usr")
  set(_unit_dir "/lib/systemd/system")
else()
  set(_unit_dir "${_prefix}/lib/systemd/system")
endif()
set(_tandemd "${_prefix}/${TANDEM_SBINDIR}/tandemd")

foreach(_src IN LISTS TANDEM_UNIT_SOURCES)
  get_filename_component(_name "${_src}" NAME)
  file(READ "${_src}" _text)
  string(REPLACE "/usr/local/sbin/tandemd" "${_tandemd}" _text "${_text}")
  set(_dest "$ENV{DESTDIR}${_unit_dir}/${_name}")
  message(STATUS "Installing: ${_dest} (ExecStart ${_tandemd})")
  file(WRITE "${_dest}" "${_text}")
  file(CHMOD "${_dest}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_dest}")
endforeach()

set(_env "$ENV{DESTDIR}/etc/tandem/tandemd.env")
if(EXISTS "${_env}")
  message(STATUS "Up-to-date: ${_env} (kept: it is this node's configuration)")
else()
  message(STATUS "Installing: ${_env}")
  file(MAKE_DIRECTORY "$ENV{DESTDIR}/etc/tandem")
  file(COPY_FILE "${TANDEM_ENV_SOURCE}" "${_env}")
  file(CHMOD "${_env}" PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
  list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_env}")
endif()
