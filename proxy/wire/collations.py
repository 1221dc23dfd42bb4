"""Collation ids as clients send them in the handshake (and COM_CHANGE_USER): id -> collation name.

The ids are the server's (MariaDB's information_schema.COLLATIONS, for every character set a client
may use); utf8mb3 collations carry their portable `utf8_` names. An id not listed here leaves the
session in pydble's default, utf8mb4_general_ci.
"""

from __future__ import annotations

COLLATIONS: dict[int, str] = {
    1: "big5_chinese_ci", 2: "latin2_czech_cs", 3: "dec8_swedish_ci", 4: "cp850_general_ci",
    5: "latin1_german1_ci", 6: "hp8_english_ci", 7: "koi8r_general_ci", 8: "latin1_swedish_ci",
    9: "latin2_general_ci", 10: "swe7_swedish_ci", 11: "ascii_general_ci", 12: "ujis_japanese_ci",
    13: "sjis_japanese_ci", 14: "cp1251_bulgarian_ci", 15: "latin1_danish_ci", 16: "hebrew_general_ci",
    18: "tis620_thai_ci", 19: "euckr_korean_ci", 21: "latin2_hungarian_ci", 22: "koi8u_general_ci",
    23: "cp1251_ukrainian_ci", 24: "gb2312_chinese_ci", 25: "greek_general_ci", 26: "cp1250_general_ci",
    27: "latin2_croatian_ci", 28: "gbk_chinese_ci", 29: "cp1257_lithuanian_ci", 31: "latin1_german2_ci",
    32: "armscii8_general_ci", 33: "utf8_general_ci", 34: "cp1250_czech_cs", 36: "cp866_general_ci",
    37: "keybcs2_general_ci", 38: "macce_general_ci", 39: "macroman_general_ci", 40: "cp852_general_ci",
    43: "macce_bin", 44: "cp1250_croatian_ci", 45: "utf8mb4_general_ci", 46: "utf8mb4_bin", 47: "latin1_bin",
    48: "latin1_general_ci", 49: "latin1_general_cs", 50: "cp1251_bin", 51: "cp1251_general_ci",
    52: "cp1251_general_cs", 53: "macroman_bin", 57: "cp1256_general_ci", 58: "cp1257_bin",
    59: "cp1257_general_ci", 63: "binary", 64: "armscii8_bin", 65: "ascii_bin", 66: "cp1250_bin",
    67: "cp1256_bin", 68: "cp866_bin", 69: "dec8_bin", 70: "greek_bin", 71: "hebrew_bin", 72: "hp8_bin",
    73: "keybcs2_bin", 74: "koi8r_bin", 75: "koi8u_bin", 77: "latin2_bin", 80: "cp850_bin", 81: "cp852_bin",
    82: "swe7_bin", 83: "utf8_bin", 84: "big5_bin", 85: "euckr_bin", 86: "gb2312_bin", 87: "gbk_bin",
    88: "sjis_bin", 89: "tis620_bin", 91: "ujis_bin", 92: "geostd8_general_ci", 93: "geostd8_bin",
    94: "latin1_spanish_ci", 95: "cp932_japanese_ci", 96: "cp932_bin", 97: "eucjpms_japanese_ci",
    98: "eucjpms_bin", 99: "cp1250_polish_ci", 192: "utf8_unicode_ci", 193: "utf8_icelandic_ci",
    194: "utf8_latvian_ci", 195: "utf8_romanian_ci", 196: "utf8_slovenian_ci", 197: "utf8_polish_ci",
    198: "utf8_estonian_ci", 199: "utf8_spanish_ci", 200: "utf8_swedish_ci", 201: "utf8_turkish_ci",
    202: "utf8_czech_ci", 203: "utf8_danish_ci", 204: "utf8_lithuanian_ci", 205: "utf8_slovak_ci",
    206: "utf8_spanish2_ci", 207: "utf8_roman_ci", 208: "utf8_persian_ci", 209: "utf8_esperanto_ci",
    210: "utf8_hungarian_ci", 211: "utf8_sinhala_ci", 212: "utf8_german2_ci", 213: "utf8_croatian_mysql561_ci",
    214: "utf8_unicode_520_ci", 215: "utf8_vietnamese_ci", 223: "utf8_general_mysql500_ci",
    224: "utf8mb4_unicode_ci", 225: "utf8mb4_icelandic_ci", 226: "utf8mb4_latvian_ci",
    227: "utf8mb4_romanian_ci", 228: "utf8mb4_slovenian_ci", 229: "utf8mb4_polish_ci",
    230: "utf8mb4_estonian_ci", 231: "utf8mb4_spanish_ci", 232: "utf8mb4_swedish_ci",
    233: "utf8mb4_turkish_ci", 234: "utf8mb4_czech_ci", 235: "utf8mb4_danish_ci", 236: "utf8mb4_lithuanian_ci",
    237: "utf8mb4_slovak_ci", 238: "utf8mb4_spanish2_ci", 239: "utf8mb4_roman_ci", 240: "utf8mb4_persian_ci",
    241: "utf8mb4_esperanto_ci", 242: "utf8mb4_hungarian_ci", 243: "utf8mb4_sinhala_ci",
    244: "utf8mb4_german2_ci", 245: "utf8mb4_croatian_mysql561_ci", 246: "utf8mb4_unicode_520_ci",
    247: "utf8mb4_vietnamese_ci",
}


def charset_of(collation: str) -> str:
    """The character set a collation belongs to (utf8mb4_unicode_ci -> utf8mb4, binary -> binary)."""
    return collation.split("_", 1)[0]


__all__ = ["COLLATIONS", "charset_of"]
