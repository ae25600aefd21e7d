// SPDX-License-Identifier: Apache-2.0
#include "tools/cowctl/config.h"

#include <gtest/gtest.h>

#include "tests/cowctl/fake_tree.h"

namespace cowstore::cowctl {
namespace {

const char* kGood = R"(version: 1
pools:
  - name: tank
    size: 100G
    allocation_unit: 1M
    soft_threshold: 75
    luns:
      - name: vm1
        size: 10G
        block_size: 512
        backstore: tank-vm1
        wwn: 00112233-4455-6677-8899-aabbccddeeff
        copy_group: esx
        wce: false
        thin_on_thin: false
      - name: vm2
        size: 1G
        block_size: 4096
  - name: disk
    device: /dev/sdb
iscsi:
  - target: iqn.2024-01.io.cowstore:nas.tank
    portals: [0.0.0.0:3260]
    acls:
      - initiator: iqn.1998-01.com.vmware:esx1
        chap_user: esx
        chap_password: secret123456
    luns:
      - {lun: 0, pool: tank, name: vm1}
loopback:
  - wwn: naa.5001405123456789
    luns: [{lun: 0, pool: tank, name: vm2}]
)";

TEST(Config, ParsesEveryField) {
  Config c = ParseConfig(kGood, "t.yaml");
  ASSERT_EQ(c.pools.size(), 2u);
  EXPECT_EQ(c.pools[0].size, 100ull << 30);
  EXPECT_EQ(c.pools[0].soft_threshold, 75u);
  ASSERT_EQ(c.pools[0].luns.size(), 2u);
  EXPECT_EQ(c.pools[0].luns[0].copy_group, "esx");
  EXPECT_EQ(c.pools[0].luns[0].wce, false);
  EXPECT_EQ(c.pools[0].luns[0].thin_on_thin, false);
  EXPECT_EQ(c.pools[0].luns[1].thin_on_thin, std::nullopt);  // absent: the handler's default
  EXPECT_EQ(c.pools[0].luns[1].block_size, 4096u);
  EXPECT_EQ(c.pools[1].device, "/dev/sdb");
  ASSERT_EQ(c.iscsi.size(), 1u);
  EXPECT_EQ(c.iscsi[0].acls[0].chap_password, "secret123456");
  EXPECT_EQ(c.iscsi[0].luns[0].name, "vm1");
  EXPECT_EQ(c.loopback[0].luns[0].name, "vm2");
}

TEST(Config, DumpThenParseIsTheSame) {
  Config c = ParseConfig(kGood, "t.yaml");
  Config d = ParseConfig(DumpConfig(c), "dump");
  EXPECT_EQ(DumpConfig(d), DumpConfig(c));
  EXPECT_EQ(d.pools[0].luns[0].wwn, c.pools[0].luns[0].wwn);
  EXPECT_EQ(d.pools[0].luns[0].thin_on_thin, false);
  EXPECT_EQ(d.iscsi[0].portals, c.iscsi[0].portals);
}

TEST(Config, EmptyFileIsAnEmptyConfig) {
  Config c = ParseConfig("", "e.yaml");
  EXPECT_TRUE(c.pools.empty());
}

std::string ErrorOf(const std::string& text) {
  try {
    ParseConfig(text, "c.yaml");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ErrorsNameFileLineAndField) {
  EXPECT_EQ(ErrorOf("pools:\n  - name: tank\n    size: lots\n"),
            "c.yaml:3: pools[0].size: invalid size 'lots': expected a size such as 4096, 64K, 10G or 1.5T "
            "(binary units)");
  EXPECT_EQ(ErrorOf("pools:\n  - name: tank\n    size: 1G\n    colour: red\n"),
            "c.yaml:4: pools[0].colour: unknown field");
  EXPECT_EQ(ErrorOf("pools:\n  - size: 1G\n"), "c.yaml:2: pools[0].name: missing");
  EXPECT_NE(ErrorOf("pools:\n  - name: .bad\n    size: 1G\n").find("c.yaml:2: pools[0].name: invalid pool name"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    size: 1G\n    luns:\n      - name: a\n        size: 1000\n"),
            "c.yaml:6: pools[0].luns[0].size: must be a non-zero multiple of the block size");
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    size: 1G\n    luns:\n      - name: a\n        size: 1M\n"
                    "        block_size: 1024\n"),
            "c.yaml:7: pools[0].luns[0].block_size: must be 512 or 4096");
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    size: 1G\n    allocation_unit: 3M\n"),
            "c.yaml:4: pools[0].allocation_unit: must be a power of two from 64 KiB to 1 MiB");
  EXPECT_EQ(ErrorOf("iscsi:\n  - target: nope\n"), "c.yaml:2: iscsi[0].target: not a valid IQN");
  EXPECT_EQ(ErrorOf("iscsi:\n  - target: iqn.2024-01.io.x:y\n    luns:\n      - {lun: 0, pool: t, name: a}\n"),
            "c.yaml:4: iscsi[0].luns[0]: LUN t/a is not in pools");
  EXPECT_EQ(ErrorOf("version: 4\n"), "c.yaml:1: version: unsupported version (this cowctl reads versions 1 to 3)");
  EXPECT_EQ(ErrorOf("pools: [\n"), "c.yaml:2: (syntax): end of sequence flow not found");
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    size: 1G\n  - name: t\n    size: 1G\n"),
            "c.yaml:4: pools[1].name: pool 't' listed twice");
}

// Every identity string restore writes into configfs or hands an initiator
// is checked on load (these all loaded before, and restore then wrote them).
TEST(Config, IdentitiesAreCheckedOnLoad) {
  const std::string pool = "pools:\n  - name: t\n    size: 1G\n    luns:\n";
  auto lun = [](const std::string& name, const std::string& wwn) {
    return "      - {name: " + name + ", size: 1M, backstore: t-" + name + ", wwn: " + wwn + "}\n";
  };
  const std::string a = "00112233-4455-6677-8899-aabbccddeeff";
  EXPECT_EQ(ErrorOf(pool + lun("a", a) + lun("b", a)),
            "c.yaml:6: pools[0].luns[1].wwn: gives the same identifier (naa.600140500112233445566778899aabbc) as "
            "pools[0].luns[0].wwn: an initiator would take the two LUNs for one disk");
  // Two WWNs that differ only past the 25 hex digits the NAA keeps, or in case.
  EXPECT_NE(ErrorOf(pool + lun("a", a) + lun("b", "00112233-4455-6677-8899-aabbccddee00")).find("same identifier"),
            std::string::npos);
  EXPECT_NE(ErrorOf(pool + lun("a", a) + lun("b", "00112233-4455-6677-8899-AABBCCDDEEFF")).find("same identifier"),
            std::string::npos);
  EXPECT_EQ(ErrorOf(pool + lun("a", "\"x\\ny\"")),
            "c.yaml:5: pools[0].luns[0].wwn: expected a UUID, 8-4-4-4-12 hex digits (as 'cowctl save' writes it)");
  EXPECT_NE(ErrorOf(pool + lun("a", "../../../../../../../../../etc/passwd")).find("expected a UUID"), std::string::npos);
  EXPECT_EQ(ErrorOf(pool + "      - {name: a, size: 1M, backstore: x}\n      - {name: b, size: 1M, backstore: x}\n"),
            "c.yaml:6: pools[0].luns[1].backstore: backstore 'x' is also pools[0].luns[0]'s");
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    uuid: nope\n    size: 1G\n"),
            "c.yaml:3: pools[0].uuid: expected the pool's UUID, 8-4-4-4-12 hex digits (as 'cowctl save' writes it)");
  EXPECT_EQ(ErrorOf("pools:\n  - name: t\n    device: sdb\n"), "c.yaml:3: pools[0].device: expected an absolute path");

  const std::string tgt = "iscsi:\n  - target: iqn.2024-01.io.x:y\n";
  auto acl = [&](const std::string& user, const std::string& password) {
    return tgt + "    acls:\n      - initiator: iqn.2024-01.io.x:i\n        chap_user: " + user +
           "\n        chap_password: " + password + "\n";
  };
  EXPECT_EQ(ErrorOf(acl("\"esx\\nx\"", "secret123456")),
            "c.yaml:5: iscsi[0].acls[0].chap_user: may hold only printable ASCII without spaces (no newline, no "
            "accents)");
  EXPECT_NE(ErrorOf(acl("esx", "\"s\u00e9cret123456\"")).find("iscsi[0].acls[0].chap_password: may hold only printable ASCII"),
            std::string::npos);
  EXPECT_NE(ErrorOf(acl("esx", "\"secret 123456\"")).find("chap_password: may hold only"), std::string::npos);
  EXPECT_NE(ErrorOf(acl("esx", std::string(256, 'x'))).find("chap_password: must be 1 to 255 characters"),
            std::string::npos);
  EXPECT_NE(ErrorOf(acl("NULLuser", "secret123456")).find("chap_user: must not start with NULL"), std::string::npos);
  EXPECT_EQ(ErrorOf(acl("esx", std::string(255, 'x'))), "");  // as long as LIO takes
  EXPECT_EQ(ErrorOf(acl("esx", "short")), "");                  // a secret targetcli set: restored as it was

  EXPECT_EQ(ErrorOf(tgt + "    portals: [\"[/../../x]:3260\"]\n"),
            "c.yaml:3: iscsi[0].portals[0]: expected IPv4:port or [IPv6]:port");
  EXPECT_NE(ErrorOf(tgt + "    portals: [\"[fe80::1/../x]:3260\"]\n").find("portals[0]"), std::string::npos);
  EXPECT_EQ(ErrorOf(tgt + "    portals: [\"[::]:3260\", \"[fe80::1]:3261\"]\n"), "");
  EXPECT_EQ(ErrorOf(tgt + tgt.substr(7)), "c.yaml:3: iscsi[1].target: target iqn.2024-01.io.x:y listed twice");

  EXPECT_EQ(ErrorOf("loopback:\n  - wwn: naa./../../../../aa\n"),
            "c.yaml:2: loopback[0].wwn: expected naa. and 16 hex digits");
  EXPECT_EQ(ErrorOf("loopback:\n  - wwn: naa.5001405abcdef012\n  - wwn: naa.5001405abcdef012\n"),
            "c.yaml:3: loopback[1].wwn: loopback target naa.5001405abcdef012 listed twice");
  EXPECT_EQ(ErrorOf(pool + lun("a", a) + tgt + "    luns:\n      - {lun: 0, pool: t, name: a}\n"
                    "      - {lun: 1, pool: t, name: a}\n"),
            "c.yaml:10: iscsi[0].luns[1]: LUN t/a is exported twice by this target");
}

TEST(Config, Version3RecordsThePoolUuid) {
  const std::string text = "version: 3\npools:\n  - name: t\n    uuid: 0EC52BFC-A7BB-48B7-94A4-24E650D2D1EF\n"
                           "    size: 1G\n";
  std::string dumped = DumpConfig(ParseConfig(text, "v3.yaml"));
  EXPECT_NE(dumped.find("version: 3\n"), std::string::npos) << dumped;
  EXPECT_NE(dumped.find("  - name: t\n    uuid: 0ec52bfc-a7bb-48b7-94a4-24e650d2d1ef\n"), std::string::npos) << dumped;
  // Files from older cowctls (no uuid) still load.
  EXPECT_EQ(DumpConfig(ParseConfig("version: 2\npools:\n  - name: t\n    size: 1G\n", "v2.yaml")).find("uuid"),
            std::string::npos);
}

TEST(Config, TheGrainIsKeptAndAFileWithoutItMeansTheAllocationUnit) {
  Config c = ParseConfig("pools:\n  - name: g\n    size: 1G\n    allocation_unit: 64K\n    grain: 4K\n"
                         "  - name: old\n    size: 1G\n    allocation_unit: 256K\n",
                         "g.yaml");
  ASSERT_EQ(c.pools.size(), 2u);
  EXPECT_EQ(c.pools[0].sharing_unit(), 4096u);
  EXPECT_EQ(c.pools[1].sharing_unit(), 256u << 10);  // written before grain was: format 2
  std::string dumped = DumpConfig(c);
  EXPECT_NE(dumped.find("    allocation_unit: 65536\n    grain: 4096\n"), std::string::npos) << dumped;
  // A format 2 pool's entry has no grain: an older cowctl can restore it.
  EXPECT_NE(dumped.find("    allocation_unit: 262144\n    soft_threshold:"), std::string::npos) << dumped;
  EXPECT_EQ(DumpConfig(ParseConfig(dumped, "dump")), dumped);
}

TEST(Config, AGrainTheStoreRefusesNamesFileLineAndField) {
  const std::string pool = "pools:\n  - name: t\n    size: 1G\n    allocation_unit: 64K\n";
  EXPECT_EQ(ErrorOf(pool + "    grain: 3K\n"), "c.yaml:5: pools[0].grain: grain of 3072 bytes is not a power of two");
  EXPECT_EQ(ErrorOf(pool + "    grain: 256\n"),
            "c.yaml:5: pools[0].grain: grain of 256 bytes is below the smallest LUN block size (512)");
  EXPECT_EQ(ErrorOf(pool + "    grain: 128K\n"),
            "c.yaml:5: pools[0].grain: grain of 131072 bytes is larger than the allocation unit");
  EXPECT_NE(ErrorOf(pool + "    grain: some\n").find("c.yaml:5: pools[0].grain: invalid grain 'some'"),
            std::string::npos);
}

// A version 2 target: who sees which LUN, under which number.
const char* kMapped = R"(version: 2
pools:
  - name: tank
    size: 1G
    luns:
      - {name: vm1, size: 8M, backstore: tank-vm1}
      - {name: vm2, size: 8M, backstore: tank-vm2}
iscsi:
  - target: iqn.2024-01.io.cowstore:nas.tank
    acls:
      - initiator: iqn.1998-01.com.vmware:esx1
        mapped_luns:
          - {lun: 0, mapped_lun: 0}
          - {lun: 1, mapped_lun: 3, write_protect: true}
      - initiator: iqn.1998-01.com.vmware:esx2
        mapped_luns: []
      - initiator: iqn.1998-01.com.vmware:esx3
    luns:
      - {lun: 0, pool: tank, name: vm1}
      - {lun: 1, pool: tank, name: vm2}
)";

TEST(Config, MappedLunsParseAndDumpBack) {
  Config c = ParseConfig(kMapped, "m.yaml");
  const auto& acls = c.iscsi.at(0).acls;
  ASSERT_EQ(acls.size(), 3u);
  EXPECT_EQ(acls[0].mapped_luns, (std::vector<MappedLun>{{0, 0, false}, {1, 3, true}}));
  EXPECT_EQ(acls[1].mapped_luns, std::vector<MappedLun>{});  // sees nothing
  EXPECT_FALSE(acls[2].mapped_luns.has_value());             // version 1 style: every LUN
  std::string dump = DumpConfig(c);
  EXPECT_NE(dump.find("version: 3\n"), std::string::npos) << dump;
  EXPECT_NE(dump.find("        mapped_luns:\n          - {lun: 0, mapped_lun: 0}\n"
                      "          - {lun: 1, mapped_lun: 3, write_protect: true}\n"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("mapped_luns: []"), std::string::npos) << dump;
  Config d = ParseConfig(dump, "dump");
  EXPECT_EQ(DumpConfig(d), dump);
  EXPECT_EQ(d.iscsi[0].acls[1].mapped_luns, std::vector<MappedLun>{});
  EXPECT_FALSE(d.iscsi[0].acls[2].mapped_luns.has_value());  // absent stays absent
  // A version 1 file has no mapped_luns and still reads.
  Config v1 = ParseConfig(kGood, "t.yaml");
  EXPECT_FALSE(v1.iscsi[0].acls[0].mapped_luns.has_value());
}

TEST(Config, MappedLunErrorsNameFileLineAndField) {
  auto with = [](const std::string& from, const std::string& to) {
    std::string t = kMapped;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  EXPECT_EQ(ErrorOf(with("{lun: 1, mapped_lun: 3,", "{lun: 7, mapped_lun: 3,")),
            "c.yaml:14: iscsi[0].acls[0].mapped_luns[1].lun: target iqn.2024-01.io.cowstore:nas.tank has no LUN 7 "
            "(its luns: 0, 1)");
  EXPECT_EQ(ErrorOf(with("{lun: 1, mapped_lun: 3,", "{lun: 1, mapped_lun: 0,")),
            "c.yaml:14: iscsi[0].acls[0].mapped_luns[1].mapped_lun: mapped LUN number used twice");
  EXPECT_EQ(ErrorOf(with("{lun: 1, mapped_lun: 3,", "{lun: 0, mapped_lun: 3,")),
            "c.yaml:14: iscsi[0].acls[0].mapped_luns[1].lun: LUN 0 mapped twice");
  EXPECT_EQ(ErrorOf(with("write_protect: true", "write_protect: maybe")),
            "c.yaml:14: iscsi[0].acls[0].mapped_luns[1].write_protect: expected true or false");
  EXPECT_EQ(ErrorOf(with("{lun: 0, mapped_lun: 0}", "{lun: 0}")),
            "c.yaml:13: iscsi[0].acls[0].mapped_luns[0].mapped_lun: missing");
  EXPECT_EQ(ErrorOf(with("{lun: 0, mapped_lun: 0}", "{lun: 0, mapped_lun: 0, rw: 1}")),
            "c.yaml:13: iscsi[0].acls[0].mapped_luns[0].rw: unknown field");
  EXPECT_EQ(ErrorOf(with("mapped_luns: []", "mapped_luns: 0")),
            "c.yaml:16: iscsi[0].acls[1].mapped_luns: expected a list");
}

TEST(Config, WriteIsAtomicAndPrivate) {
  testing::TempDir d;
  std::string p = d.path() + "/etc/cowstore.yaml";
  WriteConfig(p, ParseConfig(kGood, "t"));
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(LoadConfig(p).pools.size(), 2u);
  EXPECT_THROW(LoadConfig(d.path() + "/missing.yaml"), UserError);
}

}  // namespace
}  // namespace cowstore::cowctl
