// pki init / pki show: the cluster CA, the controller's client certificate and one server
// certificate per node (CN = node name), made with the OpenSSL API in common/net.
#include <ctime>
#include <nlohmann/json.hpp>
#include <iostream>

#include "cli_common.hpp"
#include "commands.hpp"
#include "tandem/net/pki.hpp"

namespace tandem::cli {
namespace {

std::string utc(std::chrono::system_clock::time_point t) {
  std::time_t tt = std::chrono::system_clock::to_time_t(t);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&tt));
  return buf;
}

nlohmann::ordered_json info_json(const std::string& file, const net::CertInfo& c) {
  return {{"file", file},           {"subject_cn", c.subject_cn},   {"issuer_cn", c.issuer_cn},
          {"dns", c.dns_names},     {"ip", c.ip_addresses},         {"server_auth", c.server_auth},
          {"client_auth", c.client_auth}, {"ca", c.is_ca},          {"not_after", utc(c.not_after)},
          {"sha256", c.sha256_fingerprint}};
}

int show(const std::string& dir, const std::vector<std::string>& nodes, const std::string& output) {
  net::PkiLayout layout{dir};
  std::vector<std::pair<std::string, std::filesystem::path>> files{{"ca", layout.ca_cert()},
                                                                   {"controller", layout.controller_cert()}};
  for (const auto& n : nodes) files.emplace_back(n, layout.node_cert(n));
  auto arr = nlohmann::ordered_json::array();
  int failures = 0;
  for (const auto& [label, path] : files) {
    auto info = net::inspect_certificate_file(path);
    if (!info) {
      ++failures;
      if (output == "json") arr.push_back({{"file", path.string()}, {"error", info.error().message}});
      else std::cerr << label << ": " << info.error().message << "\n";
      continue;
    }
    if (output == "json") {
      arr.push_back(info_json(path.string(), *info));
    } else {
      std::cout << label << ": CN=" << info->subject_cn << ", issued by " << info->issuer_cn << ", valid until "
                << utc(info->not_after) << "\n  " << path.string() << "\n  sha256 " << info->sha256_fingerprint << "\n";
    }
  }
  if (output == "json") std::cout << arr.dump(2) << "\n";
  return failures ? kExitFailed : 0;
}

}  // namespace

void add_pki_commands(CLI::App& app) {
  auto* pki = app.add_subcommand("pki", "The cluster's certificates for mutual TLS between tandemctl and tandemd");
  pki->require_subcommand(1);

  struct InitOpts {
    ManifestArg manifest;
    std::string dir;
    bool force = false;
  };
  auto o = std::make_shared<InitOpts>();
  auto* init = pki->add_subcommand(
      "init", "Make a cluster CA, a controller certificate and one certificate per node of the manifest");
  init->add_option("dir", o->dir, "Directory for ca.pem, controller.pem and nodes/NAME.pem (keys 0600)")->required();
  add_manifest_arg(init, o->manifest);
  init->add_flag("--force", o->force, "Replace existing files (every enrolled node must then be re-enrolled)");
  init->footer("Node certificates carry CN = node name and the node's addresses as SANs; the controller\n"
               "checks the CN on every connection. Nothing is written if any file exists, unless --force.");
  init->callback([o] {
    auto r = load(o->manifest);
    if (!r.manifest) std::exit(report_errors(r, o->manifest.output));
    std::vector<net::NodeSpec> nodes;
    std::vector<std::string> names;
    for (const auto& n : r.manifest->nodes) {
      net::NodeSpec spec{n.name, {n.address}};
      if (n.fabric_address != n.address) spec.addresses.push_back(n.fabric_address);
      nodes.push_back(spec);
      names.push_back(n.name);
    }
    auto made = net::init_cluster_pki(o->dir, "controller", nodes, o->force ? net::Overwrite::yes : net::Overwrite::no);
    if (!made) {
      std::cerr << "tandemctl pki init: " << made.error().message << "\n";
      std::exit(kExitFailed);
    }
    if (o->manifest.output != "json") std::cout << "wrote the cluster PKI to " << o->dir << "\n";
    std::exit(show(o->dir, names, o->manifest.output));
  });

  auto show_opts = std::make_shared<InitOpts>();
  auto* sh = pki->add_subcommand("show", "Show the certificates of a PKI directory: CN, issuer, expiry, fingerprint");
  sh->add_option("dir", show_opts->dir, "PKI directory made by `tandemctl pki init`")->required()->check(CLI::ExistingDirectory);
  add_manifest_arg(sh, show_opts->manifest);
  sh->callback([show_opts] {
    auto r = load(show_opts->manifest);
    if (!r.manifest) std::exit(report_errors(r, show_opts->manifest.output));
    std::vector<std::string> names;
    for (const auto& n : r.manifest->nodes) names.push_back(n.name);
    std::exit(show(show_opts->dir, names, show_opts->manifest.output));
  });
}

}  // namespace tandem::cli
