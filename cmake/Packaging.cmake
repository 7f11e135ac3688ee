# Debian packages, one per program, so a node installs only the agent (and the engine) and not
# libssh and the controller:
#   tandem-agent       tandemd, tandemd.service, the dead-man units, /etc/tandem/tandemd.env (conffile)
#   tandem-controller  tandemctl, the shipped manifests
#   tandem-serve       tandem-serve (a CUDA build when configured with nvcc)
# each with its man page, bash completion, copyright and changelog, stripped, with its debug
# symbols in a -dbgsym .ddeb beside it. `cd build && cpack -G DEB` (or deploy/setup.sh --deb);
# tests/packaging checks them with lintian and installs them into a Debian 12 root.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tandem)
set(CPACK_PACKAGE_VENDOR "tandem")
set(CPACK_PACKAGE_CONTACT "tandem maintainers <maintainers@tandem.invalid>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# CPackDeb prepends this summary to every package's description unless it is CPack's own
# default; each package has its own synopsis (tandem_package below), so it is set to that default.
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${CMAKE_PROJECT_NAME} built using CMake")
# Stripping is done by the debuginfo split below (CPACK_STRIP_FILES would strip first and leave it nothing).
# A cross build's toolchain file sets CPACK_DEBIAN_PACKAGE_ARCHITECTURE (cmake/toolchains/).

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://tandem.invalid/")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debug symbols: split out of the stripped binaries into <package>-dbgsym (.ddeb), by build id.
set(CPACK_DEBIAN_DEBUGINFO_PACKAGE ON)

set(_pkg_components "")
set(_pkg_dir ${PROJECT_BINARY_DIR}/packaging)
macro(tandem_package component target summary description)
  if(TARGET ${target})
    list(APPEND _pkg_components ${component})
    string(TOUPPER ${component} _C)
    set(CPACK_DEBIAN_${_C}_PACKAGE_NAME tandem-${component})
    # CPack's DEB description: the first line is the synopsis, the rest the extended text.
    set(CPACK_DEBIAN_${_C}_DESCRIPTION "${summary}\n${description}")
    # copyright and a native package's changelog.gz, as Debian policy puts them.
    install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright ${_pkg_dir}/changelog.gz
            DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/tandem-${component} COMPONENT ${component})
  endif()
endmacro()

# Debian wants the changelog compressed with gzip -9n (no name or time in the header).
file(MAKE_DIRECTORY ${_pkg_dir})
add_custom_command(OUTPUT ${_pkg_dir}/changelog.gz
  COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/deploy/debian/changelog > ${_pkg_dir}/changelog.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/deploy/debian/changelog
  COMMENT "Compressing the Debian changelog")
add_custom_target(deb_changelog ALL DEPENDS ${_pkg_dir}/changelog.gz)

tandem_package(agent tandemd "tandem node agent (tandemd)"
  "The per-node daemon of tandem: answers tandemctl over mutual TLS, runs the node\nhygiene checklist with exact undo, supervises the engine rank and owns the\ndead-man rollback on a systemd timer. Not started until the node is enrolled.")
tandem_package(controller tandemctl "tandem controller CLI (tandemctl)"
  "The operator's command of tandem: validates declarative manifests, plans and\nbinds a two-node tensor-parallel LLM server, proves it with gates and rolls\nit back. Talks to each node's tandemd over mutual TLS; enrols nodes over SSH.")
tandem_package(serve tandem-serve "tandem inference server (tandem-serve)"
  "An OpenAI-compatible inference server for the GLM model family: tensor\nparallel ranks, paged KV cache and DFlash speculative decoding. Accepts the\nvllm serve flags of a tandem manifest.")

if(TARGET tandemd)
  # Maintainer scripts and conffiles must be named as dpkg wants them: copy deploy/debian/agent.*.
  foreach(_s postinst prerm postrm conffiles)
    configure_file(${PROJECT_SOURCE_DIR}/deploy/debian/agent.${_s} ${_pkg_dir}/agent/${_s} COPYONLY)
    list(APPEND CPACK_DEBIAN_AGENT_PACKAGE_CONTROL_EXTRA ${_pkg_dir}/agent/${_s})
  endforeach()
  set(CPACK_DEBIAN_AGENT_PACKAGE_RECOMMENDS "systemd")
  # The env file is 0640 on purpose (it names what the agent may execute); lintian is told so.
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/agent.lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
          RENAME tandem-agent COMPONENT agent)
  set(CPACK_DEBIAN_AGENT_PACKAGE_SUGGESTS "tandem-serve")
endif()
if(TARGET tandemctl)
  set(CPACK_DEBIAN_CONTROLLER_PACKAGE_SUGGESTS "openssh-client")
endif()

set(CPACK_COMPONENTS_ALL ${_pkg_components})
include(CPack)
