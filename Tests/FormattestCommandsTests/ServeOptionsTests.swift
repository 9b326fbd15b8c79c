//===----------------------------------------------------------------------===//
// FormAttest — server-side Apple App Attest for signed forms.
// SPDX-License-Identifier: Apache-2.0
//===----------------------------------------------------------------------===//

import ArgumentParser
import FormAttestFlows
import FormattestCommands
import Logging
import Testing

/// `serve`'s settings are declared once, in ``ServeSettings/all``: its flags, their values and
/// its readers are checked against that table here, so that a setting misspelled, missing or
/// read as something it is not fails a test rather than falling back to a default in production.
struct ServeOptionsTests {
    /// A value each kind accepts (the lower end of a range).
    static func sample(_ setting: ServeSetting) -> String? {
        switch setting.kind {
        case .text, .path, .list: return "x"
        case .port: return "8080"
        case .integer(let range): return String(range.lowerBound)
        case .seconds(let range): return String(Int(range.lowerBound.rounded(.up)))
        case .choice(let words): return words[0]
        case .toggle: return nil
        }
    }

    @Test("every setting of the table is one flag of serve, given under its own key and no other; serve has no flag outside the table")
    func everySettingIsOneFlag() throws {
        let keys = ServeSettings.all.map(\.key)
        #expect(Set(keys).count == keys.count, "a key twice in the table")
        #expect(Set(try ServeOptions.parse([]).givenFlags.keys) == Set(keys))
        for setting in ServeSettings.all {
            let value = Self.sample(setting)
            let options = try ServeOptions.parse([setting.flag] + (value.map { [$0] } ?? []))
            let given = options.givenFlags
            #expect(given[setting.key] == [value ?? "true"], "\(setting.flag)")
            #expect(given.filter { $0.key != setting.key && !$0.value.isEmpty }.isEmpty, "\(setting.flag): \(given)")
        }
        // A flag the table does not have is refused by the parser.
        #expect(throws: (any Error).self) { try ServeOptions.parse(["--max-conections", "10"]) }
    }

    @Test("with no sources every setting that has a default resolves to it, from the default; the others are unset")
    func defaultsResolve() throws {
        let resolved = try ServeSettings.resolve(flags: [:], environment: [:])
        for setting in ServeSettings.all {
            #expect(resolved.source(setting.key) == "default")
            #expect(!resolved.isSet(setting.key))
            if let value = setting.defaultValue {
                if setting.kind.isList {
                    #expect(resolved.list(setting.key).joined(separator: ",") == value)
                } else if setting.kind.isToggle {
                    #expect(resolved.toggle(setting.key) == (value == "true"))
                } else {
                    #expect(resolved.text(setting.key) == value)
                }
            } else {
                #expect(resolved.textIfSet(setting.key) == nil, "\(setting.key)")
            }
        }
        // The typed readers give the table's defaults (what serve's settings were before: 60 s of
        // idle timeout, 1,024 connections, 5 ms purge steps, the tolerant counter rule).
        #expect(resolved.duration("idle-timeout") == .seconds(60))
        #expect(resolved.integer("max-connections") == 1024)
        #expect(resolved.duration("purge-step-target") == .milliseconds(5))
        #expect(resolved.choice("counter-rule", as: CounterRule.self) == .tolerant)
        #expect(resolved.choice("log-level", as: Logger.Level.self) == .info)
    }

    @Test("every word of a choice read as a type is one of that type's values, spelled the same")
    func choicesConvert() throws {
        func words(_ key: String) -> [String] {
            guard case .choice(let words) = ServeSettings.all.first(where: { $0.key == key })?.kind else { return [] }
            return words
        }
        let checks: [(String, (ServeSettings.Resolved, String) -> String)] = [
            ("log-level", { $0.choice($1, as: Logger.Level.self).rawValue }),
            ("counter-rule", { $0.choice($1, as: CounterRule.self).rawValue }),
            ("environment", { $0.choice($1, as: EnvironmentChoice.self).rawValue }),
        ]
        for (key, read) in checks {
            #expect(!words(key).isEmpty, "\(key) is not a choice")
            for word in words(key) {
                let resolved = try ServeSettings.resolve(flags: [key: [word]], environment: [:])
                #expect(resolved.source(key) == "command line")
                #expect(read(resolved, key) == word)
            }
        }
    }

    @Test("a setting's key is its ServeOptions property's name in kebab case")
    func propertyKeys() {
        #expect(ServeSettings.key(ofProperty: "maxConnections") == "max-connections")
        #expect(ServeSettings.key(ofProperty: "rateLimitIpv6Prefix") == "rate-limit-ipv6-prefix")
        #expect(ServeSettings.key(ofProperty: "port") == "port")
    }

    @Test(
        "a listen address that is neither an IP literal nor a host name stops serve at start, naming the setting and its source (before: only the bind failed)"
    )
    func listenAddresses() throws {
        let good = [
            "127.0.0.1", "0.0.0.0", "::1", "::", "fe80::1", "fe80::1%lo", "fe80::1%eth0.5", "::ffff:10.0.0.1", "localhost", "localhost.",
            "api.bank.example", "a-b.c9", "EXAMPLE.org",
        ]
        for good in good {
            #expect(try ServeSettings.resolve(flags: ["host": [good]], environment: [:]).text("host") == good)
            #expect(try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_ADMIN_HOST": good]).textIfSet("admin-host") == good)
        }
        let bad = [
            "exa mple", "256.1.1.1", "1.2.3", "1.2.3.4.5", "foo_bar", "bad..name", "-lead.example", "trail-.example", "ex%ample",
            "[::1]", "::1%", "fe80::1%a b", "127.0.0.1%lo", "host:8080", String(repeating: "a", count: 64) + ".example",
            String(repeating: "a.", count: 127) + "ab", "a..", ".",
            // What the resolver reads as an IPv4 number spelled otherwise (r14 F2: 0x0 listened on every interface).
            "0x0", "0x7f.1", "127.1", "0177.0.0.1", "0xdead", "0",
        ]
        for text in bad {
            let refused = #expect(throws: UsageError.self) { try ServeSettings.resolve(flags: ["host": [text]], environment: [:]) }
            #expect(
                refused?.description == "--host (command line): must be an IPv4 address in dotted decimal, an IPv6 address or a host name.", "\(text)"
            )
            let fromEnvironment = #expect(throws: UsageError.self) {
                try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_ADMIN_HOST": text])
            }
            #expect(fromEnvironment?.description.hasPrefix("FORMATTEST_ADMIN_HOST (environment): must be an IPv4") == true, "\(text)")
        }
    }

    @Test(
        "text that looks like other text is refused in every text setting, from any source: invalid UTF-8 (U+FFFD), zero-width and bidirectional characters, the byte-order mark, line separators"
    )
    func invisibleCharacters() throws {
        let hidden = [
            "\u{FFFD}", "\u{200B}", "\u{200D}", "\u{202E}", "\u{2066}", "\u{FEFF}", "\u{2028}", "\u{E000}", "\u{AD}",
            // r14 F6: the no-break space, the Hangul filler, a variation selector; a space at the end.
            "\u{A0}", "\u{3164}", "\u{FE0F}", " ",
        ]
        for scalar in hidden {
            let issuer = "https://bank.example" + scalar
            let flag = #expect(throws: UsageError.self) { try ServeSettings.resolve(flags: ["issuer": [issuer]], environment: [:]) }
            #expect(
                flag?.description
                    == "--issuer (command line): must be non-empty text without control or invisible characters, or a space at either end.")
            let variable = #expect(throws: UsageError.self) {
                try ServeSettings.resolve(flags: [:], environment: ["FORMATTEST_ISSUER": issuer])
            }
            #expect(variable?.description.hasPrefix("FORMATTEST_ISSUER (environment): must be non-empty text") == true)
        }
        let leading = #expect(throws: UsageError.self) { try ServeSettings.resolve(flags: ["issuer": [" https://bank.example"]], environment: [:]) }
        #expect(leading != nil)
        // Visible text beyond ASCII, and spaces inside, are text like any other.
        #expect(try ServeSettings.resolve(flags: ["data-dir": ["/srv/My Data"]], environment: [:]).text("data-dir") == "/srv/My Data")
        #expect(try ServeSettings.resolve(flags: ["issuer": ["https://bänk.example/é"]], environment: [:]).text("issuer") == "https://bänk.example/é")
    }

    @Test("a single-value flag given twice is named (ArgumentParser keeps the last without a word); list flags repeat, and -- ends the flags")
    func repeatedFlags() {
        #expect(ServeSettings.repeatedFlags(["--port", "1", "--host", "::1", "--port=2"]) == ["--port"])
        #expect(ServeSettings.repeatedFlags(["--issuer=a", "--issuer=b", "--store", "memory", "--store", "memory"]) == ["--issuer", "--store"])
        #expect(ServeSettings.repeatedFlags(["--insecure-no-caller-auth", "--insecure-no-caller-auth"]) == ["--insecure-no-caller-auth"])
        #expect(ServeSettings.repeatedFlags(["--app-id", "A.b", "--app-id", "C.d", "--port", "1"]).isEmpty)
        #expect(ServeSettings.repeatedFlags(["--port", "1", "--", "--port"]).isEmpty)
    }
}
