-- mrc.lua: Wireshark (4.0 and later) dissector for mrclab's MRC extensions and the SRv6
-- micro-SID carrier in IPv6 destination addresses.
--
--   tshark -X lua_script:experiments/tools/wireshark/mrc.lua -r FILE [-V]
--   or copy this file to ~/.local/lib/wireshark/plugins/ (`tshark -G folders` lists the folders)
--
-- MRC packets are RoCEv2 packets (UDP 4791) whose BTH opcode is in the manufacturer-specific
-- range 0xE0-0xFF. Wireshark's own InfiniBand dissector decodes the BTH (opcode, P_Key,
-- destination QP, AckReq, PSN) and shows the rest as "Vendor Specific or Unknown Header
-- Sequence": for such opcodes it calls no payload sub-dissector (neither the
-- "infiniband.payload" heuristics nor the "infiniband" Decode As table; those are tried only for
-- IBTA opcodes that carry a payload). So this script is a post-dissector: it runs after every
-- other dissector, finds the BTH Wireshark's dissector found (field infiniband.bth), and
-- decodes the MRC headers after it. Packets whose opcode or version is not MRC's are left alone.
-- On any IPv6 packet it also decodes a destination address in the uSID locator block: each
-- 16-bit uSID named by switch or host from mrclab's numbering plan, no fabric file needed.
--
-- Layout (docs/wire-format.md): BTH 12 | MRCETH 4 (flags, version, reserved in data / the
-- sender's NIC ports down in control packets) | extension |
-- payload + pad (data) | ICRC 4 (little-endian CRC-32; 0 = not computed).

-- BEGIN GENERATED CONSTANTS
-- Written by `python -m experiments.tools.dissector` from endpoints/protocol/wire.py and
-- topologies/model.py: do not edit (a unit test fails while this block is stale).
local W = {
    VERSION = 2,
    PKEY = 0xFFFF,
    TVER = 0,
    VENDOR_MASK = 0xE0,
    DATA_OPCODE_MAX = 0xEF,
    OP_SACK = 0xF1,
    OP_NACK = 0xF2,
    OP_EV_PROBE = 0xF3,
    OP_EV_PROBE_REPLY = 0xF4,
    BTH_LEN = 12,
    COMMON_LEN = 16,
    QPN_OFF = 5,
    PSN_OFF = 9,
    ACKREQ_OFF = 8,
    ACKREQ_BIT = 0x80,
    PADCNT_OFF = 1,
    PADCNT_MASK = 0x30,
    PADCNT_SHIFT = 4,
    FLAGS_OFF = 12,
    VERSION_OFF = 13,
    PORTS_DOWN_OFF = 14,
    F_RETRANSMIT = 0x01,
    F_TRIMMED = 0x02,
    F_TRIMMED_LASTHOP = 0x04,
    F_ECN_ECHO = 0x08,
    FLAGS_MASK = 0x0F,
    DATA_HDR = 44,
    ICRC_LEN = 4,
    SACK_LEN = 44,
    NACK_LEN = 32,
    PROBE_LEN = 32,
    MAX_PAYLOAD = 9000,
    PSN_MASK = 0xFFFFFF,
    USID_BLOCK = "fcbb:bb00",
    ROLE_LEAF = 1,
    ROLE_SPINE = 2,
    ROLE_HOST = 3,
    USID_PLANE_SHIFT = 12,
    USID_ROLE_SHIFT = 10,
    USID_ROLE_MASK = 0x03,
    USID_INDEX_MASK = 0x3FF,
}
local OPCODES = { [0xE0] = "DATA_FIRST", [0xE1] = "DATA_MIDDLE", [0xE2] = "DATA_LAST",
    [0xE3] = "DATA_LAST_IMM", [0xE4] = "DATA_ONLY", [0xE5] = "DATA_ONLY_IMM", [0xF1] = "SACK",
    [0xF2] = "NACK", [0xF3] = "EV_PROBE", [0xF4] = "EV_PROBE_REPLY" }
local DATA_OPCODES = { [0xE0] = true, [0xE1] = true, [0xE2] = true, [0xE3] = true, [0xE4] = true,
    [0xE5] = true }
local NACK_REASONS = { [1] = "TRIMMED", [2] = "TRIMMED_LASTHOP", [3] = "NO_BITMAP",
    [4] = "NO_PKT_BUFFER", [5] = "PSN_OOR_WINDOW", [6] = "SEQUENCE_ERROR" }
local DATA = { msn = 16, payload_len = 20, reserved = 22, offset = 24, msg_len = 32, tsval = 36,
    immediate = 40 }
local SACK = { base = 16, bitmap = 20, echo_ev = 28, echo_ts = 32, ecn_count = 36, credit = 38 }
local NACK = { reason_cack = 16, echo_ev = 20, echo_ts = 24 }
local PROBE = { probe_id = 16, tsval = 20, probed_ev = 24 }
-- END GENERATED CONSTANTS

local mrc = Proto("mrc", "MRC (Multipath Reliable Connection)")

local ROLES = { [W.ROLE_LEAF] = "leaf (T0)", [W.ROLE_SPINE] = "spine (T1)", [W.ROLE_HOST] = "host NIC" }
local ICRC_STATUS = { [0] = "zero (not computed)", [1] = "Good", [2] = "Bad" }
local LAYERS = { plain = "destination", outer = "outer destination", inner = "inner destination" }
local RESERVED_FLAGS = bit32.band(bit32.bnot(W.FLAGS_MASK), 0xFF)

local pf = {
    opcode = ProtoField.uint8("mrc.opcode", "Opcode", base.HEX, OPCODES),
    qpn = ProtoField.uint24("mrc.qpn", "Destination QP", base.HEX),
    psn = ProtoField.uint24("mrc.psn", "PSN", base.DEC),
    ackreq = ProtoField.bool("mrc.ackreq", "Acknowledge request", 8, nil, W.ACKREQ_BIT),
    padcnt = ProtoField.uint8("mrc.padcnt", "Pad count", base.DEC, nil, W.PADCNT_MASK),
    ev = ProtoField.uint32("mrc.ev", "Entropy value (EV)", base.HEX),
    ce = ProtoField.bool("mrc.ce", "Arrived CE-marked (ECN 11 in an IPv6 header)"),
    flags = ProtoField.uint8("mrc.flags", "Flags", base.HEX),
    f_retx = ProtoField.bool("mrc.flags.retransmit", "Retransmission", 8, nil, W.F_RETRANSMIT),
    f_trim = ProtoField.bool("mrc.flags.trimmed", "Trimmed", 8, nil, W.F_TRIMMED),
    f_trimlh = ProtoField.bool("mrc.flags.trimmed_lasthop", "Trimmed at the last hop", 8, nil,
        W.F_TRIMMED_LASTHOP),
    f_ecne = ProtoField.bool("mrc.flags.ecn_echo", "ECN echo", 8, nil, W.F_ECN_ECHO),
    f_resv = ProtoField.uint8("mrc.flags.reserved", "Reserved", base.HEX, nil, RESERVED_FLAGS),
    version = ProtoField.uint8("mrc.version", "Version", base.DEC),
    reserved = ProtoField.uint16("mrc.reserved", "Reserved", base.HEX),
    ports_down = ProtoField.uint16("mrc.ports_down", "Ports down (bit p: plane p)", base.HEX),
    -- data
    msn = ProtoField.uint32("mrc.msn", "Message sequence number (MSN)", base.DEC),
    payload_len = ProtoField.uint16("mrc.payload_len", "Payload length", base.DEC),
    offset = ProtoField.uint64("mrc.offset", "Placement offset", base.DEC),
    msg_len = ProtoField.uint32("mrc.msg_len", "Message length", base.DEC),
    tsval = ProtoField.uint32("mrc.tsval", "Sender timestamp (us)", base.DEC),
    immediate = ProtoField.uint32("mrc.immediate", "Immediate data", base.HEX),
    payload = ProtoField.bytes("mrc.payload", "Payload"),
    pad = ProtoField.bytes("mrc.pad", "Pad"),
    -- SACK / NACK
    cack = ProtoField.uint24("mrc.sack.cack", "Cumulative ACK (BTH PSN)", base.DEC),
    base_psn = ProtoField.uint32("mrc.sack.base", "Bitmap base PSN", base.DEC),
    bitmap = ProtoField.uint64("mrc.sack.bitmap", "SACK bitmap", base.HEX),
    received = ProtoField.string("mrc.sack.received", "PSNs received above the cumulative ACK"),
    missing = ProtoField.string("mrc.sack.missing", "PSNs missing below the newest received"),
    echo_ev = ProtoField.uint32("mrc.echo_ev", "Echoed EV", base.HEX),
    echo_ts = ProtoField.uint32("mrc.echo_ts", "Echoed timestamp (us)", base.DEC),
    ecn_count = ProtoField.uint16("mrc.sack.ecn_count", "CE-marked packets since last SACK", base.DEC),
    credit = ProtoField.uint16("mrc.sack.credit", "Credit", base.DEC),
    reason = ProtoField.uint8("mrc.nack.reason", "NACK reason", base.DEC, NACK_REASONS),
    nack_cack = ProtoField.uint24("mrc.nack.cack", "Cumulative ACK", base.DEC),
    -- probes
    probe_id = ProtoField.uint32("mrc.probe.id", "Probe id", base.DEC),
    probe_ev = ProtoField.uint32("mrc.probe.ev", "Probed EV", base.HEX),
    -- ICRC
    icrc = ProtoField.uint32("mrc.icrc", "ICRC", base.HEX),
    icrc_status = ProtoField.uint8("mrc.icrc.status", "ICRC status", base.DEC, ICRC_STATUS),
    -- subtrees (filter on them: mrc.sack, mrc.nack, mrc.data ...)
    bth = ProtoField.none("mrc.bth", "Base Transport Header (MRC view)"),
    meth = ProtoField.none("mrc.meth", "MRC Extended Transport Header"),
    data = ProtoField.none("mrc.data", "MRC Data Extension"),
    sack = ProtoField.none("mrc.sack", "MRC SACK Extension"),
    nack = ProtoField.none("mrc.nack", "MRC NACK Extension"),
    probe = ProtoField.none("mrc.probe", "MRC Probe Extension"),
    -- micro-SID carrier
    srv6_layer = ProtoField.string("mrc.srv6.layer", "Address"),
    srv6_block = ProtoField.uint32("mrc.srv6.block", "Locator block", base.HEX),
    usid = ProtoField.uint16("mrc.usid", "uSID", base.HEX),
    usid_name = ProtoField.string("mrc.usid.name", "Name"),
    usid_role = ProtoField.uint8("mrc.usid.role", "Role", base.DEC, ROLES),
    usid_plane = ProtoField.uint8("mrc.usid.plane", "Plane", base.DEC),
    usid_index = ProtoField.uint16("mrc.usid.index", "Index", base.DEC),
    plane = ProtoField.uint8("mrc.plane", "Plane", base.DEC),
    path = ProtoField.string("mrc.srv6.path", "Remaining path"),
    next_sid = ProtoField.string("mrc.srv6.next", "Next switch (active uSID)"),
    dst_host = ProtoField.string("mrc.srv6.dst_host", "Destination host"),
}
mrc.fields = pf

local ex = {
    malformed = ProtoExpert.new("mrc.malformed", "Malformed MRC packet",
        expert.group.MALFORMED, expert.severity.ERROR),
    unknown_op = ProtoExpert.new("mrc.unknown_opcode", "Unknown MRC opcode",
        expert.group.UNDECODED, expert.severity.WARN),
    bad_icrc = ProtoExpert.new("mrc.icrc.bad", "Bad ICRC",
        expert.group.CHECKSUM, expert.severity.ERROR),
    reserved = ProtoExpert.new("mrc.reserved_set", "Reserved bits set",
        expert.group.PROTOCOL, expert.severity.WARN),
    retransmission = ProtoExpert.new("mrc.retransmission", "Retransmission",
        expert.group.SEQUENCE, expert.severity.NOTE),
    trimmed = ProtoExpert.new("mrc.trimmed", "Payload trimmed by a switch",
        expert.group.SEQUENCE, expert.severity.NOTE),
    nack = ProtoExpert.new("mrc.nack", "NACK", expert.group.SEQUENCE, expert.severity.NOTE),
    ports_down = ProtoExpert.new("mrc.ports_down.set", "Sender's NIC ports down",
        expert.group.PROTOCOL, expert.severity.NOTE),
    bad_usid = ProtoExpert.new("mrc.usid.invalid", "uSID outside the mrclab numbering plan",
        expert.group.PROTOCOL, expert.severity.WARN),
    mixed_planes = ProtoExpert.new("mrc.usid.mixed_planes", "uSIDs of different planes",
        expert.group.PROTOCOL, expert.severity.WARN),
}
mrc.experts = { ex.malformed, ex.unknown_op, ex.bad_icrc, ex.reserved, ex.retransmission,
                ex.trimmed, ex.nack, ex.bad_usid, ex.mixed_planes, ex.ports_down }

mrc.prefs.block = Pref.string("uSID locator block", W.USID_BLOCK,
    "The 32-bit locator block of micro-SID carriers, as two hex groups")
mrc.prefs.verify_icrc = Pref.bool("Verify non-zero ICRCs", true,
    "Compute the RoCEv2 ICRC of packets that carry one (0 means not computed)")

-- Fields of other dissectors this one reads (a post-dissector sees the finished packet).
local f_bth = Field.new("infiniband.bth")
local f_ipv6 = Field.new("ipv6")
local f_ip6_dst = Field.new("ipv6.dst")
local f_ip6_flow = Field.new("ipv6.flow")
local f_ip6_tclass = Field.new("ipv6.tclass")
local f_udp_sport = Field.new("udp.srcport")
local f_udp_len = Field.new("udp.length")

local band, bor, bxor, rshift, lshift = bit32.band, bit32.bor, bit32.bxor, bit32.rshift, bit32.lshift
local sbyte = string.byte

-- Big-endian reads from a Lua string at a 0-based offset.
local function u8(s, i) return sbyte(s, i + 1) end
local function u16(s, i) local a, b = sbyte(s, i + 1, i + 2); return a * 256 + b end
local function u24(s, i) local a, b, c = sbyte(s, i + 1, i + 3); return (a * 256 + b) * 256 + c end
local function u32(s, i) local a, b, c, d = sbyte(s, i + 1, i + 4); return ((a * 256 + b) * 256 + c) * 256 + d end

local function block_value()
    local hi, lo = string.match(mrc.prefs.block, "^%s*(%x+):(%x+)%s*$")
    if not hi then
        hi, lo = string.match(W.USID_BLOCK, "^(%x+):(%x+)$")
    end
    return bor(lshift(tonumber(hi, 16), 16), tonumber(lo, 16))
end

-- ----- CRC-32 for the ICRC (RoCEv2, IBTA Annex A17) ---------------------------------------------
local CRC_TABLE = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) == 1 then c = bxor(0xEDB88320, rshift(c, 1)) else c = rshift(c, 1) end
    end
    CRC_TABLE[i] = c
end

local function crc_bytes(crc, s, mask)
    for i = 1, #s do
        local b = (mask and mask[i - 1]) or sbyte(s, i)
        crc = bxor(CRC_TABLE[band(bxor(crc, b), 0xFF)], rshift(crc, 8))
    end
    return crc
end

-- CRC over: 8 bytes of ones, the IPv6 header before UDP (class, label, hop limit as ones), the
-- UDP header (checksum as ones), the BTH (byte 4: FECN, BECN, reserved, as ones), and the rest
-- up to the ICRC.
local function compute_icrc(tvb, ip_off, udp_off, icrc_off)
    local crc = 0xFFFFFFFF
    for _ = 1, 8 do crc = bxor(CRC_TABLE[band(bxor(crc, 0xFF), 0xFF)], rshift(crc, 8)) end
    local ip = tvb:raw(ip_off, 40)
    crc = crc_bytes(crc, ip, { [0] = bor(sbyte(ip, 1), 0x0F), [1] = 0xFF, [2] = 0xFF, [3] = 0xFF, [7] = 0xFF })
    crc = crc_bytes(crc, tvb:raw(udp_off, 8), { [6] = 0xFF, [7] = 0xFF })
    crc = crc_bytes(crc, tvb:raw(udp_off + 8, icrc_off - udp_off - 8), { [4] = 0xFF })
    return bxor(crc, 0xFFFFFFFF)
end

-- ----- micro-SID carrier -----------------------------------------------------------------------
local function usid_parts(u)
    local plane1 = rshift(u, W.USID_PLANE_SHIFT)
    local role = band(rshift(u, W.USID_ROLE_SHIFT), W.USID_ROLE_MASK)
    local index = band(u, W.USID_INDEX_MASK)
    if plane1 == 0 or ROLES[role] == nil then return nil end
    local plane = plane1 - 1
    local name
    if role == W.ROLE_LEAF then name = string.format("p%dl%d", plane, index)
    elseif role == W.ROLE_SPINE then name = string.format("p%ds%d", plane, index)
    else name = string.format("h%d", index) end
    return name, role, plane, index
end

local function dissect_carrier(tree, fi, layer, block)
    local r = fi.range
    if r:len() ~= 16 then return nil end
    local a = r:raw()
    if u32(a, 0) ~= block then return nil end
    local names, first_plane, sids = {}, nil, {}
    for pos = 0, 5 do
        local u = u16(a, 4 + 2 * pos)
        if u == 0 then break end  -- end of carrier (RFC 9800)
        sids[#sids + 1] = { pos = pos, u = u }
    end
    local st = tree:add(mrc, r, "MRC SRv6 micro-SID carrier")
    st:add(pf.srv6_layer, LAYERS[layer]):set_generated()
    st:add(pf.srv6_block, r(0, 4)):append_text(string.format(" (%04x:%04x::/32)",
        u16(a, 0), u16(a, 2)))
    local mixed = false
    for i, s in ipairs(sids) do
        local name, role, plane, index = usid_parts(s.u)
        local ut = st:add(pf.usid, r(4 + 2 * s.pos, 2))
        if not name then
            ut:append_text(" (not in the numbering plan)")
            ut:add_proto_expert_info(ex.bad_usid)
            names[#names + 1] = string.format("?%04x", s.u)
        else
            local what = role == W.ROLE_HOST and string.format("%s, NIC on plane %d", name, plane)
                or string.format("%s, %s %d of plane %d", name, ROLES[role], index, plane)
            ut:append_text(string.format(" %s%s", what, i == 1 and " [active]" or ""))
            ut:add(pf.usid_name, name):set_generated()
            ut:add(pf.usid_role, role):set_generated()
            ut:add(pf.usid_plane, plane):set_generated()
            ut:add(pf.usid_index, index):set_generated()
            names[#names + 1] = name
            if first_plane == nil then first_plane = plane elseif plane ~= first_plane then mixed = true end
        end
    end
    local path = table.concat(names, " ")
    st:add(pf.path, r, path):set_generated()
    if #sids > 0 then st:add(pf.next_sid, r(4, 2), names[1]):set_generated() end
    if first_plane ~= nil then st:add(pf.plane, r, first_plane):set_generated() end
    if mixed then st:add_proto_expert_info(ex.mixed_planes) end
    local last = sids[#sids]
    if last then
        local name, role = usid_parts(last.u)
        if role == W.ROLE_HOST then st:add(pf.dst_host, r(4 + 2 * last.pos, 2), name):set_generated() end
    end
    st:append_text(string.format(" (%s): %s%s", LAYERS[layer], table.concat(names, " > "),
        first_plane and string.format(", plane %d", first_plane) or ""))
    return path
end

-- ----- MRC transport ---------------------------------------------------------------------------
local function bit_of(hi, lo, i)  -- bit i of the 64-bit bitmap hi:lo
    if i < 32 then return band(rshift(lo, i), 1) end
    return band(rshift(hi, i - 32), 1)
end

local function psn_list(hi, lo, base, want_set, limit)
    -- PSNs base + i whose bitmap bit i is want_set (1 or 0), for i below `limit`
    local out = {}
    for i = 0, limit - 1 do
        if bit_of(hi, lo, i) == want_set then out[#out + 1] = tostring(band(base + i, W.PSN_MASK)) end
    end
    return table.concat(out, ",")
end

local function highest_bit(hi, lo)
    for i = 63, 0, -1 do
        if bit_of(hi, lo, i) == 1 then return i end
    end
    return -1
end

local function plane_list(mask)  -- "1,3" for the planes a ports-down mask names
    local out = {}
    for p = 0, 15 do
        if band(mask, lshift(1, p)) ~= 0 then out[#out + 1] = tostring(p) end
    end
    return table.concat(out, ",")
end

local function malformed(item, msg)
    item:add_proto_expert_info(ex.malformed, msg)
end

local function cut_short(root)
    root:append_text(" [capture cut short]")
end

-- Header fields as { field, offset from the BTH, length }, added in this order.
local BTH_FIELDS = { { pf.opcode, 0, 1 }, { pf.padcnt, W.PADCNT_OFF, 1 }, { pf.qpn, W.QPN_OFF, 3 },
    { pf.ackreq, W.ACKREQ_OFF, 1 }, { pf.psn, W.PSN_OFF, 3 } }
local FLAG_FIELDS = { { pf.f_retx, W.FLAGS_OFF, 1 }, { pf.f_trim, W.FLAGS_OFF, 1 },
    { pf.f_trimlh, W.FLAGS_OFF, 1 }, { pf.f_ecne, W.FLAGS_OFF, 1 }, { pf.f_resv, W.FLAGS_OFF, 1 } }
local DATA_FIELDS = { { pf.msn, DATA.msn, 4 }, { pf.payload_len, DATA.payload_len, 2 },
    { pf.reserved, DATA.reserved, 2 }, { pf.offset, DATA.offset, 8 }, { pf.msg_len, DATA.msg_len, 4 },
    { pf.tsval, DATA.tsval, 4 }, { pf.immediate, DATA.immediate, 4 } }
local SACK_BITMAP_FIELDS = { { pf.base_psn, SACK.base, 4 }, { pf.bitmap, SACK.bitmap, 8 } }
local SACK_ECHO_FIELDS = { { pf.echo_ev, SACK.echo_ev, 4 }, { pf.echo_ts, SACK.echo_ts, 4 },
    { pf.ecn_count, SACK.ecn_count, 2 }, { pf.credit, SACK.credit, 2 } }
local NACK_FIELDS = { { pf.reason, NACK.reason_cack, 1 }, { pf.nack_cack, NACK.reason_cack + 1, 3 },
    { pf.echo_ev, NACK.echo_ev, 4 }, { pf.echo_ts, NACK.echo_ts, 4 } }
local PROBE_FIELDS = { { pf.probe_id, PROBE.probe_id, 4 }, { pf.tsval, PROBE.tsval, 4 },
    { pf.probe_ev, PROBE.probed_ev, 4 } }

local function add_fields(tree, t, fields)
    for _, f in ipairs(fields) do tree:add(f[1], t(f[2], f[3])) end
end

-- The extension subtree of a fixed-size packet (SACK, NACK, probe) of `n` bytes, or nil when
-- it is malformed (its size is not `len`) or the capture cut it short.
local function fixed_extension(root, t, n, cut, what, len, field)
    if n ~= len then
        malformed(root, string.format("%s of %d bytes, expected %d", what, n, len))
        return nil
    end
    if cut then
        cut_short(root)
        return nil
    end
    return root:add(field, t(W.COMMON_LEN, len - W.COMMON_LEN - W.ICRC_LEN))
end

-- The MRC tree of one packet whose BTH starts at `off`; returns the Info column text, or nil
-- when the packet is not MRC's.
local function dissect_mrc(tvb, pinfo, tree, bth_fi)
    local off = bth_fi.offset
    local udp_lens = { f_udp_len() }
    if #udp_lens == 0 then return nil end
    local n = udp_lens[#udp_lens].value - 8  -- UDP payload length, as the UDP header states
    if n < W.COMMON_LEN or off + W.COMMON_LEN > tvb:len() then return nil end
    local avail = math.min(n, tvb:len() - off)
    local h = tvb:raw(off, math.min(avail, W.DATA_HDR))  -- the headers, read once
    local opcode = u8(h, 0)
    if band(opcode, W.VENDOR_MASK) ~= W.VENDOR_MASK or u8(h, W.VERSION_OFF) ~= W.VERSION then
        return nil  -- another vendor's RoCEv2 packet, or an older MRC: not ours to decode
    end
    -- A short capture (snap length, an ICMPv6 quote) holds fewer bytes than the UDP length says:
    -- decode the headers that are there, check nothing that is cut off.
    local cut = avail < n
    local t = tvb(off, avail)
    local name = OPCODES[opcode]
    local root = tree:add(mrc, t, "MRC " .. (name or string.format("opcode 0x%02x", opcode)))

    -- BTH as MRC reads it (Wireshark's InfiniBand tree shows it too)
    local bt = root:add(pf.bth, t(0, W.BTH_LEN))
    add_fields(bt, t, BTH_FIELDS)
    local b1, pkey = u8(h, W.PADCNT_OFF), u16(h, 2)
    local qpn, psn = u24(h, W.QPN_OFF), u24(h, W.PSN_OFF)
    local ackreq = band(u8(h, W.ACKREQ_OFF), W.ACKREQ_BIT) ~= 0
    if band(b1, 0x0F) ~= W.TVER or pkey ~= W.PKEY then
        malformed(bt, string.format("TVer %d / P_Key 0x%04x is not MRC's", band(b1, 0x0F), pkey))
    end

    -- MRCETH
    local flags = u8(h, W.FLAGS_OFF)
    local trimmed = band(flags, W.F_TRIMMED) ~= 0
    local et = root:add(pf.meth, t(W.BTH_LEN, W.COMMON_LEN - W.BTH_LEN))
    local ft = et:add(pf.flags, t(W.FLAGS_OFF, 1))
    add_fields(ft, t, FLAG_FIELDS)
    et:add(pf.version, t(W.VERSION_OFF, 1))
    -- the last 16 bits: reserved in data, the sender's port status in control packets
    local ports_down = 0
    if DATA_OPCODES[opcode] then
        et:add(pf.reserved, t(W.PORTS_DOWN_OFF, 2))
    else
        ports_down = u16(h, W.PORTS_DOWN_OFF)
        local pi = et:add(pf.ports_down, t(W.PORTS_DOWN_OFF, 2))
        if ports_down ~= 0 then
            pi:append_text(" (planes " .. plane_list(ports_down) .. ")")
            root:add_proto_expert_info(ex.ports_down, "Sender's NIC ports down: planes " ..
                plane_list(ports_down))
        end
    end
    if band(flags, RESERVED_FLAGS) ~= 0 then ft:add_proto_expert_info(ex.reserved) end
    -- the notes a trace reader looks for (Analyze > Expert Information), before anything a
    -- short capture may lack
    if band(flags, W.F_RETRANSMIT) ~= 0 then root:add_proto_expert_info(ex.retransmission) end
    if trimmed then
        root:add_proto_expert_info(ex.trimmed, band(flags, W.F_TRIMMED_LASTHOP) ~= 0 and
            "Payload trimmed by a switch at the last hop" or "Payload trimmed by a switch")
    end

    -- EV: low 16 bits in the UDP source port, high 16 in the flow label of the header that
    -- carries UDP (the inner one when encapsulated)
    local sports, flows = { f_udp_sport() }, { f_ip6_flow() }
    if #sports > 0 and #flows > 0 then
        local ev = bor(lshift(band(flows[#flows].value, 0xFFFF), 16), sports[#sports].value)
        root:add(pf.ev, ev):set_generated()
    end
    local ce = false
    for _, tc in ipairs({ f_ip6_tclass() }) do
        if band(tc.value, 3) == 3 then ce = true end
    end
    root:add(pf.ce, ce):set_generated()

    local info = string.format("%s QP=0x%06x PSN=%d", name or string.format("0x%02x", opcode), qpn, psn)
    local icrc_off
    if DATA_OPCODES[opcode] then
        if n < W.DATA_HDR + W.ICRC_LEN then
            malformed(root, string.format("data packet of %d bytes, headers + ICRC need %d", n,
                W.DATA_HDR + W.ICRC_LEN))
            return info
        end
        if avail < W.DATA_HDR then
            cut_short(root)
            return info
        end
        local dt = root:add(pf.data, t(W.COMMON_LEN, W.DATA_HDR - W.COMMON_LEN))
        add_fields(dt, t, DATA_FIELDS)
        local plen, pad = u16(h, DATA.payload_len), rshift(band(b1, W.PADCNT_MASK), W.PADCNT_SHIFT)
        local offset = u32(h, DATA.offset) * 4294967296 + u32(h, DATA.offset + 4)  -- exact below 2^53
        local mlen = u32(h, DATA.msg_len)
        info = info .. string.format(" MSN=%d off=%.0f len=%d", u32(h, DATA.msn), offset, plen)
        if trimmed then
            if n ~= W.DATA_HDR + W.ICRC_LEN then
                malformed(root, string.format("trimmed packet of %d bytes, expected %d", n,
                    W.DATA_HDR + W.ICRC_LEN))
            end
            icrc_off = n - W.ICRC_LEN
            info = info .. (band(flags, W.F_TRIMMED_LASTHOP) ~= 0 and " [TRIMMED at last hop]" or " [TRIMMED]")
        else
            if pad ~= band(-plen, 3) or n ~= W.DATA_HDR + plen + pad + W.ICRC_LEN then
                malformed(root, string.format("payload length %d (pad %d) disagrees with %d bytes",
                    plen, pad, n))
                return info
            end
            if plen > 0 then root:add(pf.payload, t(W.DATA_HDR, math.min(plen, avail - W.DATA_HDR))) end
            if pad > 0 and avail >= W.DATA_HDR + plen + pad then
                root:add(pf.pad, t(W.DATA_HDR + plen, pad))
            end
            icrc_off = W.DATA_HDR + plen + pad
        end
        if offset + plen > mlen or plen > W.MAX_PAYLOAD then
            malformed(dt, "payload overruns its message")
        end
    elseif opcode == W.OP_SACK then
        local st = fixed_extension(root, t, n, cut, "SACK", W.SACK_LEN, pf.sack)
        if not st then return info end
        st:add(pf.cack, t(W.PSN_OFF, 3)):set_generated()
        add_fields(st, t, SACK_BITMAP_FIELDS)
        local base, hi, lo = u32(h, SACK.base), u32(h, SACK.bitmap), u32(h, SACK.bitmap + 4)
        if base > W.PSN_MASK then malformed(st, "reserved bits set in the bitmap base") end
        st:add(pf.received, t(SACK.bitmap, 8), psn_list(hi, lo, base, 1, 64)):set_generated()
        st:add(pf.missing, t(SACK.bitmap, 8), psn_list(hi, lo, base, 0, highest_bit(hi, lo))):set_generated()
        add_fields(st, t, SACK_ECHO_FIELDS)
        icrc_off = W.SACK_LEN - W.ICRC_LEN
        info = hi ~= 0 and string.format("SACK QP=0x%06x cack=%d base=%d bitmap=0x%x%08x", qpn, psn, base, hi, lo)
            or string.format("SACK QP=0x%06x cack=%d base=%d bitmap=0x%x", qpn, psn, base, lo)
    elseif opcode == W.OP_NACK then
        local nt = fixed_extension(root, t, n, cut, "NACK", W.NACK_LEN, pf.nack)
        if not nt then return info end
        local reason = u8(h, NACK.reason_cack)
        add_fields(nt, t, NACK_FIELDS)
        if NACK_REASONS[reason] then
            root:add_proto_expert_info(ex.nack, "NACK " .. NACK_REASONS[reason])
        else
            malformed(nt, string.format("unknown NACK reason %d", reason))
        end
        icrc_off = W.NACK_LEN - W.ICRC_LEN
        info = string.format("NACK %s QP=0x%06x PSN=%d", NACK_REASONS[reason] or tostring(reason), qpn, psn)
    elseif opcode == W.OP_EV_PROBE or opcode == W.OP_EV_PROBE_REPLY then
        local pt = fixed_extension(root, t, n, cut, "probe", W.PROBE_LEN, pf.probe)
        if not pt then return info end
        add_fields(pt, t, PROBE_FIELDS)
        icrc_off = W.PROBE_LEN - W.ICRC_LEN
        info = string.format("%s QP=0x%06x id=%d EV=0x%08x", name, qpn, u32(h, PROBE.probe_id),
            u32(h, PROBE.probed_ev))
    else
        root:add_proto_expert_info(ex.unknown_op)
        return info
    end

    if band(flags, W.F_RETRANSMIT) ~= 0 then info = info .. " [RETX]" end
    if ackreq then info = info .. " [A]" end
    if ports_down ~= 0 then info = info .. " [PORTS DOWN " .. plane_list(ports_down) .. "]" end

    -- ICRC
    if cut then
        cut_short(root)
        return info
    end
    local icrc = t(icrc_off, W.ICRC_LEN):le_uint()
    local it = root:add_le(pf.icrc, t(icrc_off, W.ICRC_LEN))
    local status = 0
    if icrc ~= 0 then
        status = 1
        local ips = { f_ipv6() }
        if mrc.prefs.verify_icrc and #ips > 0 then
            local want = compute_icrc(tvb, ips[#ips].offset, off - 8, off + icrc_off)
            if want ~= icrc then
                status = 2
                it:add_proto_expert_info(ex.bad_icrc, string.format("Bad ICRC (expected 0x%08x)", want))
            end
        end
    end
    it:add(pf.icrc_status, status):set_generated()
    it:append_text(" [" .. ICRC_STATUS[status] .. "]")
    return info
end

function mrc.dissector(tvb, pinfo, tree)
    local block = block_value()
    local dsts = { f_ip6_dst() }
    local paths = {}
    for i, fi in ipairs(dsts) do
        local layer = #dsts == 1 and "plain" or (i == 1 and "outer" or "inner")
        local p = dissect_carrier(tree, fi, layer, block)
        if p and layer ~= "inner" then paths[#paths + 1] = p end
    end
    local bths = { f_bth() }
    if #bths == 0 then return end
    local info = dissect_mrc(tvb, pinfo, tree, bths[#bths])
    if info then
        pinfo.cols.protocol = "MRC"
        if #paths > 0 then info = info .. " via " .. paths[1] end
        pinfo.cols.info = info
    end
end

register_postdissector(mrc)
