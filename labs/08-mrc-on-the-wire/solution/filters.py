"""Lab 8, reading a capture with tshark: each answer is a Wireshark display filter, the kind you
type in Wireshark's filter bar or give tshark with `-Y`. The MRC dissector's fields are named
`mrc.*` (list them: `tshark -X lua_script:experiments/tools/wireshark/mrc.lua -G fields | grep
mrc`). The checker runs tshark with each filter over your capture and over a made-up one that
holds every kind of packet, and compares the frames it picks with the ones it should.
"""

# TODO 5: the NACKs saying a switch trimmed a data packet, wherever in the fabric it was cut
TRIMMED_NACKS = "mrc.nack.reason == 1 || mrc.nack.reason == 2"
# END TODO 5

# TODO 6: the data packets the sender sent again (retransmissions)
RETRANSMISSIONS = "mrc.flags.retransmit == 1"
# END TODO 6

# TODO 7: the SACKs whose bitmap shows a hole: a PSN not received below the newest one it
# reports received
SACKS_WITH_HOLES = 'mrc.sack.missing != ""'
# END TODO 7
