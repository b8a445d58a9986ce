#!/usr/bin/env python3
"""Generate the seed catalogue, config/catalogue.json.

Standard library only and deterministic: every pseudo-random choice comes
from a random.Random seeded with a hash of the plan id, so re-running the
script always writes the same file.

Run from anywhere:  python3 scripts/gen_catalogue.py

Deliberate fixtures in the data:

* Unsellable plans (cost_floor_cents > list_price_cents, i.e. "plan.unavailable"),
  exactly six, in six different countries:
      pl_cn_10gb_30d, pl_mv_10gb_30d, pl_pg_5gb_30d,
      pl_ht_10gb_30d, pl_ao_5gb_30d, pl_in_unl_10d
* Delisted plans (active = false), seven:
      pl_de_3gb_15d, pl_th_1gb_7d, pl_br_20gb_30d, pl_ua_10gb_30d,
      pl_lb_5gb_30d, pl_ar_unl_10d, pl_global_1gb_7d
* About 8% of plans have a cost floor at 83%-94% of list, so that deep
  partner discounts get clamped to the floor.
* Four sandbox-only plans (region "sandbox").
"""

import hashlib
import json
import math
import os
import random
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "config", "catalogue.json")

UNSELLABLE_IDS = [
    "pl_cn_10gb_30d",
    "pl_mv_10gb_30d",
    "pl_pg_5gb_30d",
    "pl_ht_10gb_30d",
    "pl_ao_5gb_30d",
    "pl_in_unl_10d",
]
INACTIVE_IDS = [
    "pl_de_3gb_15d",
    "pl_th_1gb_7d",
    "pl_br_20gb_30d",
    "pl_ua_10gb_30d",
    "pl_lb_5gb_30d",
    "pl_ar_unl_10d",
    "pl_global_1gb_7d",
]

REGIONS = [
    "europe", "asia", "middle-east", "africa",
    "north-america", "latin-america", "caribbean", "oceania",
]
BUNDLE_SLUGS = REGIONS + ["balkans", "gcc"]

# ---------------------------------------------------------------------------
# Destinations: (code, English short name, region)
# Excluded: uninhabited / unserved territories (AQ, BV, HM, UM, ...), and
# sanctioned or not-sold markets (KP, IR, SY, CU, RU, BY, VE, SD, AF, ...).
# ---------------------------------------------------------------------------
DESTINATIONS = [
    # Europe
    ("AD", "Andorra", "europe"),
    ("AL", "Albania", "europe"),
    ("AT", "Austria", "europe"),
    ("AX", "Åland Islands", "europe"),
    ("BA", "Bosnia and Herzegovina", "europe"),
    ("BE", "Belgium", "europe"),
    ("BG", "Bulgaria", "europe"),
    ("CH", "Switzerland", "europe"),
    ("CY", "Cyprus", "europe"),
    ("CZ", "Czechia", "europe"),
    ("DE", "Germany", "europe"),
    ("DK", "Denmark", "europe"),
    ("EE", "Estonia", "europe"),
    ("ES", "Spain", "europe"),
    ("FI", "Finland", "europe"),
    ("FO", "Faroe Islands", "europe"),
    ("FR", "France", "europe"),
    ("GB", "United Kingdom", "europe"),
    ("GG", "Guernsey", "europe"),
    ("GI", "Gibraltar", "europe"),
    ("GR", "Greece", "europe"),
    ("HR", "Croatia", "europe"),
    ("HU", "Hungary", "europe"),
    ("IE", "Ireland", "europe"),
    ("IM", "Isle of Man", "europe"),
    ("IS", "Iceland", "europe"),
    ("IT", "Italy", "europe"),
    ("JE", "Jersey", "europe"),
    ("LI", "Liechtenstein", "europe"),
    ("LT", "Lithuania", "europe"),
    ("LU", "Luxembourg", "europe"),
    ("LV", "Latvia", "europe"),
    ("MC", "Monaco", "europe"),
    ("MD", "Moldova", "europe"),
    ("ME", "Montenegro", "europe"),
    ("MK", "North Macedonia", "europe"),
    ("MT", "Malta", "europe"),
    ("NL", "Netherlands", "europe"),
    ("NO", "Norway", "europe"),
    ("PL", "Poland", "europe"),
    ("PT", "Portugal", "europe"),
    ("RO", "Romania", "europe"),
    ("RS", "Serbia", "europe"),
    ("SE", "Sweden", "europe"),
    ("SI", "Slovenia", "europe"),
    ("SK", "Slovakia", "europe"),
    ("SM", "San Marino", "europe"),
    ("TR", "Turkey", "europe"),
    ("UA", "Ukraine", "europe"),
    ("VA", "Vatican City", "europe"),
    # Asia (incl. the Caucasus and Central Asia)
    ("AM", "Armenia", "asia"),
    ("AZ", "Azerbaijan", "asia"),
    ("BD", "Bangladesh", "asia"),
    ("BN", "Brunei", "asia"),
    ("CN", "China", "asia"),
    ("GE", "Georgia", "asia"),
    ("HK", "Hong Kong", "asia"),
    ("ID", "Indonesia", "asia"),
    ("IN", "India", "asia"),
    ("JP", "Japan", "asia"),
    ("KG", "Kyrgyzstan", "asia"),
    ("KH", "Cambodia", "asia"),
    ("KR", "South Korea", "asia"),
    ("KZ", "Kazakhstan", "asia"),
    ("LA", "Laos", "asia"),
    ("LK", "Sri Lanka", "asia"),
    ("MM", "Myanmar", "asia"),
    ("MN", "Mongolia", "asia"),
    ("MO", "Macao", "asia"),
    ("MV", "Maldives", "asia"),
    ("MY", "Malaysia", "asia"),
    ("NP", "Nepal", "asia"),
    ("PH", "Philippines", "asia"),
    ("PK", "Pakistan", "asia"),
    ("SG", "Singapore", "asia"),
    ("TH", "Thailand", "asia"),
    ("TJ", "Tajikistan", "asia"),
    ("TW", "Taiwan", "asia"),
    ("UZ", "Uzbekistan", "asia"),
    ("VN", "Vietnam", "asia"),
    # Middle East
    ("AE", "United Arab Emirates", "middle-east"),
    ("BH", "Bahrain", "middle-east"),
    ("EG", "Egypt", "middle-east"),
    ("IL", "Israel", "middle-east"),
    ("IQ", "Iraq", "middle-east"),
    ("JO", "Jordan", "middle-east"),
    ("KW", "Kuwait", "middle-east"),
    ("LB", "Lebanon", "middle-east"),
    ("OM", "Oman", "middle-east"),
    ("PS", "Palestine", "middle-east"),
    ("QA", "Qatar", "middle-east"),
    ("SA", "Saudi Arabia", "middle-east"),
    # Africa
    ("AO", "Angola", "africa"),
    ("BF", "Burkina Faso", "africa"),
    ("BJ", "Benin", "africa"),
    ("BW", "Botswana", "africa"),
    ("CD", "DR Congo", "africa"),
    ("CG", "Congo", "africa"),
    ("CI", "Côte d'Ivoire", "africa"),
    ("CM", "Cameroon", "africa"),
    ("CV", "Cape Verde", "africa"),
    ("DZ", "Algeria", "africa"),
    ("ET", "Ethiopia", "africa"),
    ("GA", "Gabon", "africa"),
    ("GH", "Ghana", "africa"),
    ("GM", "Gambia", "africa"),
    ("GN", "Guinea", "africa"),
    ("GW", "Guinea-Bissau", "africa"),
    ("KE", "Kenya", "africa"),
    ("LR", "Liberia", "africa"),
    ("LS", "Lesotho", "africa"),
    ("MA", "Morocco", "africa"),
    ("MG", "Madagascar", "africa"),
    ("ML", "Mali", "africa"),
    ("MR", "Mauritania", "africa"),
    ("MU", "Mauritius", "africa"),
    ("MW", "Malawi", "africa"),
    ("MZ", "Mozambique", "africa"),
    ("NA", "Namibia", "africa"),
    ("NE", "Niger", "africa"),
    ("NG", "Nigeria", "africa"),
    ("RE", "Réunion", "africa"),
    ("RW", "Rwanda", "africa"),
    ("SC", "Seychelles", "africa"),
    ("SL", "Sierra Leone", "africa"),
    ("SN", "Senegal", "africa"),
    ("SZ", "Eswatini", "africa"),
    ("TD", "Chad", "africa"),
    ("TG", "Togo", "africa"),
    ("TN", "Tunisia", "africa"),
    ("TZ", "Tanzania", "africa"),
    ("UG", "Uganda", "africa"),
    ("ZA", "South Africa", "africa"),
    ("ZM", "Zambia", "africa"),
    ("ZW", "Zimbabwe", "africa"),
    # North America
    ("CA", "Canada", "north-america"),
    ("MX", "Mexico", "north-america"),
    ("US", "United States", "north-america"),
    # Latin America
    ("AR", "Argentina", "latin-america"),
    ("BO", "Bolivia", "latin-america"),
    ("BR", "Brazil", "latin-america"),
    ("BZ", "Belize", "latin-america"),
    ("CL", "Chile", "latin-america"),
    ("CO", "Colombia", "latin-america"),
    ("CR", "Costa Rica", "latin-america"),
    ("EC", "Ecuador", "latin-america"),
    ("GF", "French Guiana", "latin-america"),
    ("GT", "Guatemala", "latin-america"),
    ("GY", "Guyana", "latin-america"),
    ("HN", "Honduras", "latin-america"),
    ("NI", "Nicaragua", "latin-america"),
    ("PA", "Panama", "latin-america"),
    ("PE", "Peru", "latin-america"),
    ("PY", "Paraguay", "latin-america"),
    ("SR", "Suriname", "latin-america"),
    ("SV", "El Salvador", "latin-america"),
    ("UY", "Uruguay", "latin-america"),
    # Caribbean
    ("AG", "Antigua and Barbuda", "caribbean"),
    ("AI", "Anguilla", "caribbean"),
    ("AW", "Aruba", "caribbean"),
    ("BB", "Barbados", "caribbean"),
    ("BL", "Saint Barthélemy", "caribbean"),
    ("BM", "Bermuda", "caribbean"),
    ("BQ", "Caribbean Netherlands", "caribbean"),
    ("BS", "Bahamas", "caribbean"),
    ("CW", "Curaçao", "caribbean"),
    ("DM", "Dominica", "caribbean"),
    ("DO", "Dominican Republic", "caribbean"),
    ("GD", "Grenada", "caribbean"),
    ("GP", "Guadeloupe", "caribbean"),
    ("HT", "Haiti", "caribbean"),
    ("JM", "Jamaica", "caribbean"),
    ("KN", "Saint Kitts and Nevis", "caribbean"),
    ("KY", "Cayman Islands", "caribbean"),
    ("LC", "Saint Lucia", "caribbean"),
    ("MF", "Saint Martin", "caribbean"),
    ("MQ", "Martinique", "caribbean"),
    ("MS", "Montserrat", "caribbean"),
    ("PR", "Puerto Rico", "caribbean"),
    ("SX", "Sint Maarten", "caribbean"),
    ("TC", "Turks and Caicos Islands", "caribbean"),
    ("TT", "Trinidad and Tobago", "caribbean"),
    ("VC", "Saint Vincent and the Grenadines", "caribbean"),
    ("VG", "British Virgin Islands", "caribbean"),
    ("VI", "U.S. Virgin Islands", "caribbean"),
    # Oceania
    ("AS", "American Samoa", "oceania"),
    ("AU", "Australia", "oceania"),
    ("CK", "Cook Islands", "oceania"),
    ("FJ", "Fiji", "oceania"),
    ("FM", "Micronesia", "oceania"),
    ("GU", "Guam", "oceania"),
    ("KI", "Kiribati", "oceania"),
    ("MP", "Northern Mariana Islands", "oceania"),
    ("NC", "New Caledonia", "oceania"),
    ("NR", "Nauru", "oceania"),
    ("NZ", "New Zealand", "oceania"),
    ("PF", "French Polynesia", "oceania"),
    ("PG", "Papua New Guinea", "oceania"),
    ("PW", "Palau", "oceania"),
    ("SB", "Solomon Islands", "oceania"),
    ("TO", "Tonga", "oceania"),
    ("VU", "Vanuatu", "oceania"),
    ("WS", "Samoa", "oceania"),
]

# ---------------------------------------------------------------------------
# Market tiers
# ---------------------------------------------------------------------------
# Top 40: six fixed sizes, two unlimited, two daily plans.
TOP40 = [
    "US", "GB", "FR", "DE", "IT", "ES", "PT", "NL", "CH", "AT",
    "GR", "TR", "JP", "KR", "CN", "HK", "TW", "SG", "MY", "TH",
    "VN", "ID", "PH", "IN", "AU", "NZ", "CA", "MX", "AE", "SA",
    "IL", "EG", "MA", "ZA", "BR", "AR", "CO", "PE", "CL", "DO",
]
# Next 20: five fixed sizes, one unlimited, one daily plan.
NEXT20 = [
    "BE", "IE", "PL", "CZ", "HR", "HU", "SE", "NO", "DK", "IS",
    "QA", "JO", "KE", "NG", "CR", "PR", "LK", "KH", "MV", "KZ",
]
# Markets whose big 30-day plans carry voice minutes and SMS.
VOICE_MARKETS = [
    "US", "GB", "FR", "DE", "IT", "ES", "TR", "JP", "KR", "HK",
    "SG", "TH", "AU", "CA", "MX", "AE", "BR", "IN",
]

# ---------------------------------------------------------------------------
# Operators (networks). Countries absent here have networks = null (no
# operator data held; about 15% of plans).
# ---------------------------------------------------------------------------
NETWORKS = {
    # big markets
    "US": ["AT&T", "T-Mobile", "Verizon"],
    "CA": ["Rogers", "Bell", "Telus"],
    "MX": ["Telcel", "AT&T Mexico", "Movistar"],
    "GB": ["EE", "Vodafone", "O2", "Three"],
    "FR": ["Orange", "SFR", "Bouygues Telecom"],
    "DE": ["Telekom", "Vodafone", "O2"],
    "IT": ["TIM", "Vodafone", "WindTre"],
    "ES": ["Movistar", "Orange", "Vodafone"],
    "PT": ["MEO", "NOS", "Vodafone"],
    "NL": ["KPN", "Vodafone", "Odido"],
    "BE": ["Proximus", "Orange", "Base"],
    "CH": ["Swisscom", "Sunrise", "Salt"],
    "AT": ["A1", "Magenta", "Drei"],
    "GR": ["Cosmote", "Vodafone", "Nova"],
    "TR": ["Turkcell", "Vodafone", "Türk Telekom"],
    "IE": ["Vodafone", "Three", "Eir"],
    "PL": ["Orange", "Play", "Plus", "T-Mobile"],
    "CZ": ["O2", "T-Mobile", "Vodafone"],
    "HR": ["Hrvatski Telekom", "A1", "Telemach"],
    "HU": ["Telekom", "Yettel", "Vodafone"],
    "SE": ["Telia", "Tele2", "Telenor", "Tre"],
    "NO": ["Telenor", "Telia"],
    "DK": ["TDC", "Telenor", "Telia", "3"],
    "IS": ["Síminn", "Vodafone", "Nova"],
    "JP": ["NTT Docomo", "SoftBank", "KDDI"],
    "KR": ["SK Telecom", "KT", "LG U+"],
    "CN": ["China Unicom", "China Mobile"],
    "HK": ["CSL", "SmarTone", "3 HK", "China Mobile HK"],
    "TW": ["Chunghwa Telecom", "Taiwan Mobile", "FarEasTone"],
    "SG": ["Singtel", "StarHub", "M1"],
    "MY": ["Maxis", "CelcomDigi", "U Mobile"],
    "TH": ["AIS", "True", "dtac"],
    "VN": ["Viettel", "Vinaphone", "MobiFone"],
    "ID": ["Telkomsel", "Indosat", "XL Axiata"],
    "PH": ["Globe", "Smart"],
    "IN": ["Airtel", "Jio", "Vi"],
    "AU": ["Telstra", "Optus", "Vodafone"],
    "NZ": ["One NZ", "Spark", "2degrees"],
    "AE": ["Etisalat", "du"],
    "SA": ["STC", "Mobily", "Zain"],
    "QA": ["Ooredoo", "Vodafone"],
    "IL": ["Partner", "Cellcom", "Pelephone"],
    "EG": ["Vodafone", "Orange", "Etisalat"],
    "MA": ["Maroc Telecom", "Orange", "Inwi"],
    "ZA": ["Vodacom", "MTN", "Cell C"],
    "KE": ["Safaricom", "Airtel"],
    "NG": ["MTN", "Airtel", "Glo"],
    "BR": ["Claro", "Vivo", "TIM"],
    "AR": ["Claro", "Movistar", "Personal"],
    "CL": ["Entel", "Movistar", "Claro"],
    "CO": ["Claro", "Movistar", "Tigo"],
    "PE": ["Claro", "Movistar", "Entel"],
    "CR": ["Kolbi", "Claro", "Liberty"],
    "DO": ["Claro", "Altice"],
    "PR": ["T-Mobile", "AT&T", "Liberty"],
    "JM": ["Digicel", "Flow"],
    # Europe, smaller
    "AD": ["Andorra Telecom"],
    "AL": ["Vodafone", "One"],
    "BA": ["BH Telecom", "m:tel"],
    "BG": ["A1", "Yettel", "Vivacom"],
    "CY": ["Cyta", "Epic"],
    "EE": ["Telia", "Elisa", "Tele2"],
    "FI": ["Elisa", "Telia", "DNA"],
    "GG": ["Sure", "JT"],
    "GI": ["Gibtelecom"],
    "IM": ["Manx Telecom"],
    "JE": ["JT", "Sure"],
    "LT": ["Telia", "Bitė", "Tele2"],
    "LU": ["POST", "Tango", "Orange"],
    "LV": ["LMT", "Tele2", "Bite"],
    "MC": ["Monaco Telecom"],
    "MD": ["Orange", "Moldcell"],
    "ME": ["One", "Crnogorski Telekom", "m:tel"],
    "MK": ["Makedonski Telekom", "A1"],
    "MT": ["GO", "Epic", "Melita"],
    "RO": ["Orange", "Vodafone", "Digi"],
    "RS": ["Yettel", "A1", "mts"],
    "SI": ["Telekom Slovenije", "A1"],
    "SK": ["Orange", "Slovak Telekom", "O2"],
    "UA": ["Kyivstar", "Vodafone", "lifecell"],
    # Asia, smaller
    "AM": ["Ucom", "Viva", "Team"],
    "AZ": ["Azercell", "Bakcell"],
    "GE": ["Magti", "Silknet", "Cellfie"],
    "BD": ["Grameenphone", "Robi"],
    "BN": ["DST"],
    "KG": ["Beeline", "MegaCom"],
    "KH": ["Smart", "Cellcard", "Metfone"],
    "KZ": ["Beeline", "Kcell", "Tele2"],
    "LA": ["Unitel", "Lao Telecom"],
    "LK": ["Dialog", "Mobitel"],
    "MN": ["Mobicom", "Unitel"],
    "MO": ["CTM", "3 Macau"],
    "MV": ["Dhiraagu", "Ooredoo"],
    "NP": ["Ncell", "Nepal Telecom"],
    "PK": ["Jazz", "Zong", "Telenor"],
    "UZ": ["Beeline", "Ucell"],
    # Middle East, smaller
    "BH": ["Batelco", "Zain", "stc"],
    "IQ": ["Zain", "Asiacell"],
    "JO": ["Zain", "Orange", "Umniah"],
    "KW": ["Zain", "Ooredoo", "stc"],
    "LB": ["Alfa", "Touch"],
    "OM": ["Omantel", "Ooredoo"],
    # Africa, smaller
    "AO": ["Unitel"],
    "BW": ["Mascom", "Orange"],
    "CD": ["Vodacom", "Airtel"],
    "CG": ["Airtel", "MTN"],
    "CI": ["Orange", "MTN"],
    "CM": ["MTN", "Orange"],
    "DZ": ["Djezzy", "Mobilis"],
    "ET": ["Ethio Telecom"],
    "GH": ["MTN", "AirtelTigo"],
    "MG": ["Telma", "Orange"],
    "MU": ["my.t", "Emtel"],
    "MZ": ["Vodacom"],
    "NA": ["MTC"],
    "RE": ["Orange", "SFR"],
    "RW": ["MTN", "Airtel"],
    "SC": ["Airtel", "Cable & Wireless"],
    "SN": ["Orange", "Free"],
    "TN": ["Ooredoo", "Orange"],
    "TZ": ["Vodacom", "Airtel"],
    "UG": ["MTN", "Airtel"],
    "ZM": ["MTN", "Airtel"],
    "ZW": ["Econet"],
    # Latin America, smaller
    "BO": ["Entel", "Tigo"],
    "EC": ["Claro", "Movistar"],
    "GF": ["Orange"],
    "GT": ["Tigo", "Claro"],
    "GY": ["Digicel"],
    "HN": ["Tigo", "Claro"],
    "NI": ["Claro"],
    "PA": ["+Móvil", "Tigo"],
    "PY": ["Tigo", "Personal"],
    "SR": ["Digicel"],
    "SV": ["Claro", "Tigo"],
    "UY": ["Antel", "Movistar"],
    # Caribbean, smaller
    "AG": ["Digicel", "Flow"],
    "AI": ["Digicel", "Flow"],
    "AW": ["Digicel", "SETAR"],
    "BB": ["Digicel", "Flow"],
    "BM": ["One Communications"],
    "BS": ["BTC", "Aliv"],
    "CW": ["Digicel", "Flow"],
    "GD": ["Digicel"],
    "GP": ["Orange", "SFR"],
    "HT": ["Digicel", "Natcom"],
    "KY": ["Digicel", "Flow"],
    "LC": ["Digicel", "Flow"],
    "MQ": ["Orange"],
    "TC": ["Digicel", "Flow"],
    "TT": ["Digicel", "bmobile"],
    "VG": ["Digicel"],
    "VI": ["Liberty"],
    # Oceania, smaller
    "FJ": ["Vodafone", "Digicel"],
    "GU": ["Docomo Pacific", "IT&E"],
    "NC": ["OPT"],
    "PF": ["Vini"],
    "PG": ["Digicel"],
    "TO": ["Digicel"],
    "VU": ["Digicel"],
    "WS": ["Digicel"],
}

# ---------------------------------------------------------------------------
# Coverage tiers
# ---------------------------------------------------------------------------
FIVE_G = {
    "US", "CA", "GB", "FR", "DE", "IT", "ES", "PT", "NL", "BE", "CH", "AT",
    "IE", "DK", "SE", "NO", "FI", "PL", "CZ", "HU", "HR", "GR", "EE", "LT",
    "LV", "LU", "SI", "SK", "RO", "BG", "IS", "MT", "CY", "MC", "TR",
    "JP", "KR", "CN", "HK", "TW", "SG", "MY", "TH", "PH", "IN", "ID", "VN",
    "MO", "AU", "NZ", "AE", "SA", "QA", "KW", "BH", "OM", "IL", "PR",
    "MX", "BR", "CL", "ZA", "GU",
}
THREE_G = {
    "AO", "BF", "BJ", "CD", "CG", "ET", "GA", "GM", "GN", "GW", "LR", "LS",
    "MG", "ML", "MR", "MW", "MZ", "NE", "SL", "TD", "TG", "ZM", "ZW",
    "MM", "TJ", "LA", "KG", "HT", "SB", "KI", "NR", "FM", "VU", "PG",
    "PS", "IQ", "LB", "BQ", "MS",
}

# ---------------------------------------------------------------------------
# Price multipliers (1.0 = cheapest markets: US/EU/Turkey/Thailand)
# ---------------------------------------------------------------------------
REGION_MULT = {
    "europe": 1.1, "asia": 1.5, "middle-east": 1.8, "africa": 2.5,
    "north-america": 1.2, "latin-america": 1.8, "caribbean": 2.6,
    "oceania": 3.0,
}
MULT = {
    "US": 1.0, "GB": 1.05, "FR": 1.0, "DE": 1.05, "IT": 1.0, "ES": 1.0,
    "PT": 1.05, "NL": 1.1, "BE": 1.1, "IE": 1.1, "AT": 1.05, "GR": 1.1,
    "PL": 1.0, "CZ": 1.05, "HU": 1.1, "HR": 1.1, "RO": 1.0, "BG": 1.05,
    "SE": 1.15, "DK": 1.15, "FI": 1.15, "NO": 1.3, "IS": 1.35, "CH": 1.6,
    "TR": 0.95, "UA": 1.3, "RS": 1.5, "BA": 1.7, "AL": 1.6, "ME": 1.6,
    "MK": 1.5, "MD": 1.6, "GI": 1.6, "GG": 1.5, "JE": 1.5, "IM": 1.5,
    "FO": 2.6, "AX": 1.4, "AD": 1.8, "MC": 1.3, "SM": 1.4, "VA": 1.3,
    "LI": 1.6,
    "TH": 0.95, "JP": 1.9, "KR": 1.6, "CN": 2.0, "HK": 1.3, "TW": 1.3,
    "SG": 1.2, "MY": 1.1, "VN": 1.1, "ID": 1.2, "PH": 1.3, "IN": 1.5,
    "KH": 1.4, "LK": 1.6, "MV": 2.3, "KZ": 1.7, "GE": 1.4, "AM": 1.5,
    "AZ": 1.8, "MO": 1.5, "MN": 2.2, "BD": 1.7, "PK": 1.9, "NP": 1.8,
    "LA": 1.7, "MM": 2.4, "TJ": 2.4, "KG": 2.0, "UZ": 1.9, "BN": 2.0,
    "AE": 1.8, "SA": 1.9, "QA": 1.9, "IL": 1.5, "EG": 1.6, "JO": 1.9,
    "KW": 2.0, "BH": 2.0, "OM": 2.1, "IQ": 2.6, "LB": 2.4, "PS": 2.4,
    "MA": 1.6, "ZA": 1.9, "KE": 2.0, "NG": 2.2, "TN": 2.0, "DZ": 2.4,
    "MU": 2.2, "RE": 1.6, "GH": 2.3, "TZ": 2.3, "UG": 2.3, "RW": 2.4,
    "SN": 2.4, "CI": 2.5, "CD": 3.2, "TD": 3.4, "NE": 3.2, "ET": 3.0,
    "AO": 2.8, "CF": 3.5, "GW": 3.2, "LS": 2.9, "MR": 3.0, "SC": 2.8,
    "CA": 1.5, "MX": 1.3,
    "BR": 1.5, "AR": 1.8, "CO": 1.6, "PE": 1.7, "CL": 1.6, "CR": 1.9,
    "EC": 1.9, "UY": 1.9, "GF": 1.8, "BZ": 2.6, "GY": 2.6, "SR": 2.6,
    "DO": 1.9, "PR": 1.2, "VI": 1.6, "JM": 2.2, "HT": 3.0, "BQ": 3.0,
    "MS": 3.4, "GP": 1.7, "MQ": 1.7, "MF": 2.0, "BL": 2.2,
    "AU": 1.9, "NZ": 2.0, "GU": 2.2, "MP": 2.6, "AS": 3.5, "FJ": 2.8,
    "PF": 3.8, "NC": 3.8, "PG": 4.0, "WS": 3.6, "TO": 4.0, "VU": 3.8,
    "SB": 4.5, "CK": 4.6, "PW": 4.2, "FM": 4.5, "NR": 5.0, "KI": 5.0,
}

# ---------------------------------------------------------------------------
# Regional and global bundles
# ---------------------------------------------------------------------------
BUNDLES = {
    # slug: (display name, price multiplier, coverage, speed, networks, plans)
    "europe": ("Europe", 1.5, ["4G", "5G"], "4G/5G",
               ["Orange", "Vodafone", "Telefónica"],
               [(1, 7), (3, 15), (5, 30), (10, 30), (20, 30), ("unl", 15)]),
    "asia": ("Asia", 1.7, ["4G", "5G"], "4G/5G",
             ["Singtel", "AIS", "China Unicom"],
             [(1, 7), (3, 15), (5, 30), (10, 30), (20, 30), ("unl", 15)]),
    "middle-east": ("Middle East", 2.0, ["4G"], "4G LTE", None,
                    [(1, 7), (3, 15), (5, 30), (10, 30)]),
    "africa": ("Africa", 2.4, ["3G", "4G"], "3G/4G", ["MTN", "Airtel", "Orange"],
               [(1, 7), (3, 15), (5, 30), (10, 30)]),
    "north-america": ("North America", 1.6, ["4G", "5G"], "4G/5G",
                      ["AT&T", "T-Mobile", "Rogers", "Telcel"],
                      [(1, 7), (3, 15), (5, 30), (10, 30), (20, 30)]),
    "latin-america": ("Latin America", 2.1, ["4G"], "4G LTE", ["Claro", "Movistar"],
                      [(3, 15), (5, 30), (10, 30), (20, 30)]),
    "caribbean": ("Caribbean", 2.3, ["4G"], "4G LTE", ["Digicel", "Flow"],
                  [(1, 7), (3, 15), (5, 30), (10, 30)]),
    "oceania": ("Oceania", 2.2, ["4G", "5G"], "4G/5G", None,
                [(1, 7), (3, 15), (5, 30), (10, 30)]),
    "balkans": ("Balkans", 1.5, ["4G"], "4G LTE", ["A1", "Yettel", "Telekom"],
                [(1, 7), (3, 15), (5, 30), (10, 30), (20, 30)]),
    "gcc": ("GCC", 1.9, ["4G", "5G"], "4G/5G", None,
            [(1, 7), (3, 15), (5, 30), (10, 30), (20, 30)]),
}
# (GB, days, list price cents, voice, sms)
GLOBAL_PLANS = [
    (1, 7, 999, None, None),
    (3, 30, 2499, None, None),
    (5, 30, 3999, None, None),
    (10, 60, 6299, None, None),
    (20, 90, 9999, None, None),
]
GLOBAL_NETWORKS = None

SANDBOX = [
    ("pl_sandbox_insufficient_balance", "Sandbox: always insufficient balance"),
    ("pl_sandbox_supplier_error", "Sandbox: supplier error"),
    ("pl_sandbox_partial", "Sandbox: partial delivery"),
    ("pl_sandbox_slow", "Sandbox: slow provisioning"),
]

KEY_ORDER = [
    "id", "name", "country_code", "region", "global", "plan_type",
    "data_amount_mb", "daily_allowance_mb", "fup_speed", "unlimited",
    "duration_days", "voice_minutes", "sms_count", "coverage_types", "speed",
    "networks", "requires_kyc", "list_price_cents", "cost_floor_cents",
    "active", "sandbox_only",
]
ID_RE = re.compile(r"^pl_[a-z0-9_]{1,60}$")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def rng_for(plan_id):
    seed = int(hashlib.sha256(plan_id.encode("utf-8")).hexdigest()[:16], 16)
    return random.Random(seed)


def retail_round(cents):
    """Round to a retail price ending in 49 or 99 cents, at least 199."""
    return max(199, int(round(cents / 50.0)) * 50 - 1)


def fixed_base(gb, days):
    mb_factor = 80 + 270 * (gb ** 0.75)
    return mb_factor * (1 + 0.004 * (days - 7))


def unl_base(days):
    return 400 + 210 * days


DAILY_PER_DAY = {500: 90, 1024: 150, 2048: 230}


def data_label(mb):
    if mb < 1024:
        return "%d MB" % mb
    return "%d GB" % (mb // 1024)


def days_label(days):
    return "1 day" if days == 1 else "%d days" % days


def size_slug(mb):
    if mb < 1024:
        return "%dmb" % mb
    return "%dgb" % (mb // 1024)


def coverage_for(cc):
    if cc in FIVE_G:
        return ["4G", "5G"], "4G/5G"
    if cc in THREE_G:
        return ["3G", "4G"], "3G/4G"
    return ["4G"], "4G LTE"


def make_plan(**kw):
    plan = {k: kw.get(k) for k in KEY_ORDER}
    return plan


# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
def country_plans(code, name, region, rank):
    """Plans for one country. rank: 0 = top 40, 1 = next 20, 2 = the rest."""
    mult = MULT.get(code, REGION_MULT[region])
    coverage, speed = coverage_for(code)
    networks = NETWORKS.get(code)
    cl = code.lower()
    out = []

    fixed = [(1, 7), (3, 15), (5, 30), (10, 30)]
    if rank <= 1:
        fixed.append((20, 30))
    if rank == 0:
        fixed.append((50, 30))
    # A few mid-size markets also sell a small 30-day plan.
    if rank == 2 and networks and len(networks) >= 2:
        fixed.insert(0, (1, 30))
    # Cheap entry plan in the very cheapest markets.
    if mult <= 1.05 and rank == 0:
        fixed.insert(0, (0.5, 7))

    for gb, days in fixed:
        mb = int(gb * 1024) if gb >= 1 else 500
        pid = "pl_%s_%s_%dd" % (cl, size_slug(mb), days)
        r = rng_for(pid)
        price = fixed_base(gb if gb >= 1 else 0.5, days) * mult
        voice = sms = None
        if code in VOICE_MARKETS and days == 30 and gb >= 20:
            voice, sms = (100, 100) if gb >= 50 else (60, 50)
            price += 300
        price *= 0.95 + 0.10 * r.random()
        out.append(make_plan(
            id=pid,
            name="%s %s · %s" % (name, data_label(mb), days_label(days)),
            country_code=code, region=region, **{"global": False},
            plan_type="fixed", data_amount_mb=mb, daily_allowance_mb=None,
            fup_speed=None, unlimited=False, duration_days=days,
            voice_minutes=voice, sms_count=sms,
            coverage_types=coverage, speed=speed, networks=networks,
            requires_kyc=None, list_price_cents=retail_round(price),
            active=True, sandbox_only=False,
        ))

    unl = []
    daily = []
    if rank == 0:
        unl = [10, 30]
        daily = [(1024, 5), (2048, 10)]
    elif rank == 1:
        unl = [10]
        daily = [(500, 7)] if NEXT20.index(code) % 2 else [(1024, 5)]
    fup_unl = "1 Mbps" if "5G" in coverage else "512 kbps"
    for days in unl:
        pid = "pl_%s_unl_%dd" % (cl, days)
        r = rng_for(pid)
        price = unl_base(days) * mult * (0.95 + 0.10 * r.random())
        out.append(make_plan(
            id=pid, name="%s Unlimited · %s" % (name, days_label(days)),
            country_code=code, region=region, **{"global": False},
            plan_type="fixed", data_amount_mb=2048 * days,
            daily_allowance_mb=None, fup_speed=fup_unl, unlimited=True,
            duration_days=days, voice_minutes=None, sms_count=None,
            coverage_types=coverage, speed=speed, networks=networks,
            requires_kyc=None, list_price_cents=retail_round(price),
            active=True, sandbox_only=False,
        ))
    for allowance, days in daily:
        pid = "pl_%s_daily%s_%dd" % (cl, size_slug(allowance), days)
        r = rng_for(pid)
        price = DAILY_PER_DAY[allowance] * days * mult * (0.95 + 0.10 * r.random())
        out.append(make_plan(
            id=pid,
            name="%s %s/day · %s" % (name, data_label(allowance), days_label(days)),
            country_code=code, region=region, **{"global": False},
            plan_type="daily", data_amount_mb=allowance * days,
            daily_allowance_mb=allowance,
            fup_speed="512 kbps" if allowance >= 1024 else "128 kbps",
            unlimited=False, duration_days=days, voice_minutes=None,
            sms_count=None, coverage_types=coverage, speed=speed,
            networks=networks, requires_kyc=None,
            list_price_cents=retail_round(price), active=True,
            sandbox_only=False,
        ))
    return out


def bundle_plans():
    out = []
    for slug, (label, mult, coverage, speed, networks, sizes) in BUNDLES.items():
        s = slug.replace("-", "_")
        for gb, days in sizes:
            if gb == "unl":
                pid = "pl_%s_unl_%dd" % (s, days)
                r = rng_for(pid)
                price = unl_base(days) * mult * 1.1 * (0.97 + 0.06 * r.random())
                out.append(make_plan(
                    id=pid, name="%s Unlimited · %s" % (label, days_label(days)),
                    country_code=None, region=slug, **{"global": False},
                    plan_type="fixed", data_amount_mb=2048 * days,
                    daily_allowance_mb=None, fup_speed="1 Mbps", unlimited=True,
                    duration_days=days, voice_minutes=None, sms_count=None,
                    coverage_types=coverage, speed=speed, networks=networks,
                    requires_kyc=None, list_price_cents=retail_round(price),
                    active=True, sandbox_only=False,
                ))
                continue
            mb = gb * 1024
            pid = "pl_%s_%s_%dd" % (s, size_slug(mb), days)
            r = rng_for(pid)
            price = fixed_base(gb, days) * mult * (0.97 + 0.06 * r.random())
            out.append(make_plan(
                id=pid, name="%s %s · %s" % (label, data_label(mb), days_label(days)),
                country_code=None, region=slug, **{"global": False},
                plan_type="fixed", data_amount_mb=mb, daily_allowance_mb=None,
                fup_speed=None, unlimited=False, duration_days=days,
                voice_minutes=None, sms_count=None, coverage_types=coverage,
                speed=speed, networks=networks, requires_kyc=None,
                list_price_cents=retail_round(price), active=True,
                sandbox_only=False,
            ))
    for gb, days, price, voice, sms in GLOBAL_PLANS:
        mb = gb * 1024
        pid = "pl_global_%s_%dd" % (size_slug(mb), days)
        out.append(make_plan(
            id=pid, name="Global %s · %s" % (data_label(mb), days_label(days)),
            country_code=None, region="global", **{"global": True},
            plan_type="fixed", data_amount_mb=mb, daily_allowance_mb=None,
            fup_speed=None, unlimited=False, duration_days=days,
            voice_minutes=voice, sms_count=sms, coverage_types=["4G", "5G"],
            speed="4G/5G", networks=GLOBAL_NETWORKS, requires_kyc=None,
            list_price_cents=price, active=True, sandbox_only=False,
        ))
    return out


def sandbox_plans():
    return [
        make_plan(
            id=pid, name=name, country_code=None, region="sandbox",
            **{"global": False}, plan_type="fixed", data_amount_mb=1024,
            daily_allowance_mb=None, fup_speed=None, unlimited=False,
            duration_days=7, voice_minutes=None, sms_count=None,
            coverage_types=["4G"], speed="4G LTE", networks=None,
            requires_kyc=None, list_price_cents=500, cost_floor_cents=300,
            active=True, sandbox_only=True,
        )
        for pid, name in SANDBOX
    ]


def assign_floors(plans):
    """Set cost_floor_cents (and active) on every non-sandbox plan."""
    # Exactly 8% (rounded) of the plans, picked by a hash-seeded roll, get
    # a deep-discount floor.
    candidates = [p["id"] for p in plans
                  if not p["sandbox_only"] and p["id"] not in UNSELLABLE_IDS]
    n_deep = int(round(0.08 * (len(plans) + len(SANDBOX))))
    deep_ids = set(sorted(candidates,
                          key=lambda i: rng_for(i + "#deep").random())[:n_deep])
    for p in plans:
        if p["sandbox_only"]:
            continue
        pid = p["id"]
        lp = p["list_price_cents"]
        r = rng_for(pid + "#floor")
        if pid in UNSELLABLE_IDS:
            floor = max(lp + 1, int(math.ceil(lp * (1.03 + 0.12 * r.random()))))
        elif pid in deep_ids:
            # deep-discount territory: floor at 83%-94% of list
            floor = int(round(lp * (0.83 + 0.11 * r.random())))
        else:
            floor = int(round(lp * (0.56 + 0.23 * r.random())))
        p["cost_floor_cents"] = floor
        p["active"] = pid not in INACTIVE_IDS


def build():
    destinations = [
        {"code": c, "name": n, "region": r}
        for c, n, r in sorted(DESTINATIONS, key=lambda d: d[0])
    ]
    plans = []
    for c, n, r in DESTINATIONS:
        rank = 0 if c in TOP40 else 1 if c in NEXT20 else 2
        plans.extend(country_plans(c, n, r, rank))
    plans.extend(bundle_plans())
    assign_floors(plans)
    plans.extend(sandbox_plans())
    plans.sort(key=lambda p: (p["country_code"] or "", p["data_amount_mb"],
                              p["duration_days"], p["id"]))
    return {"destinations": destinations, "plans": plans}


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------
def validate(cat):
    errors = []

    def check(cond, msg):
        if not cond:
            errors.append(msg)

    dests = cat["destinations"]
    plans = cat["plans"]
    codes = [d["code"] for d in dests]
    code_region = {d["code"]: d["region"] for d in dests}
    check(len(codes) == len(set(codes)), "duplicate destination codes")
    check(len(codes) >= 170, "fewer than 170 destinations")
    check(codes == sorted(codes), "destinations not sorted by code")
    for d in dests:
        check(list(d.keys()) == ["code", "name", "region"], "dest keys %r" % d)
        check(re.fullmatch(r"[A-Z]{2}", d["code"]) is not None, "bad code %r" % d["code"])
        check(d["region"] in REGIONS, "bad region %r" % d)
        check(d["code"] not in {"KP", "IR", "SY", "CU", "AQ", "BV", "HM", "UM"},
              "excluded destination %s" % d["code"])
        check(bool(d["name"]), "empty name %s" % d["code"])

    ids = [p["id"] for p in plans]
    check(len(ids) == len(set(ids)), "duplicate plan ids")
    for pid in UNSELLABLE_IDS + INACTIVE_IDS:
        check(pid in ids, "fixture id %s missing" % pid)
    check(len({pid.split("_")[1] for pid in UNSELLABLE_IDS}) == 6,
          "unsellable ids not spread over 6 markets")

    plan_countries = set()
    for p in plans:
        pid = p["id"]
        check(list(p.keys()) == KEY_ORDER, "key order %s" % pid)
        check(ID_RE.match(pid) is not None, "bad id %s" % pid)
        for k in ("list_price_cents", "cost_floor_cents", "data_amount_mb", "duration_days"):
            v = p[k]
            check(isinstance(v, int) and not isinstance(v, bool) and v > 0,
                  "%s: %s not a positive int" % (pid, k))
        check(p["requires_kyc"] is None, "%s: requires_kyc" % pid)
        check(isinstance(p["global"], bool) and isinstance(p["unlimited"], bool)
              and isinstance(p["active"], bool) and isinstance(p["sandbox_only"], bool),
              "%s: bool fields" % pid)
        check(p["plan_type"] in ("fixed", "daily"), "%s: plan_type" % pid)
        check(all(c in ("3G", "4G", "5G") for c in p["coverage_types"]) and p["coverage_types"],
              "%s: coverage" % pid)
        check(p["networks"] is None or (isinstance(p["networks"], list) and p["networks"]),
              "%s: networks" % pid)
        cc = p["country_code"]
        if cc is not None:
            plan_countries.add(cc)
            check(cc in code_region, "%s: unknown country %s" % (pid, cc))
            check(p["region"] == code_region.get(cc), "%s: region mismatch" % pid)
            check(not p["global"], "%s: country plan marked global" % pid)
        elif p["sandbox_only"]:
            check(p["region"] == "sandbox", "%s: sandbox region" % pid)
        elif p["global"]:
            check(p["region"] == "global", "%s: global region" % pid)
        else:
            check(p["region"] in BUNDLE_SLUGS, "%s: bundle slug" % pid)
        if p["plan_type"] == "daily":
            a = p["daily_allowance_mb"]
            check(isinstance(a, int) and a > 0, "%s: daily allowance" % pid)
            check(a is not None and p["data_amount_mb"] == a * p["duration_days"],
                  "%s: daily data amount" % pid)
            check(p["fup_speed"] is not None, "%s: daily fup" % pid)
            check(not p["unlimited"], "%s: daily and unlimited" % pid)
        else:
            check(p["daily_allowance_mb"] is None, "%s: allowance on fixed" % pid)
            if p["unlimited"]:
                check(p["fup_speed"] is not None, "%s: unlimited fup" % pid)
            else:
                check(p["fup_speed"] is None, "%s: fup on fixed" % pid)
        check((p["voice_minutes"] is None) == (p["sms_count"] is None),
              "%s: voice/sms" % pid)

    check(set(codes) <= plan_countries, "destinations without plans: %s"
          % sorted(set(codes) - plan_countries))
    per_country = {}
    for p in plans:
        if p["country_code"]:
            per_country.setdefault(p["country_code"], []).append(p)
    for cc, ps in per_country.items():
        nfixed = sum(1 for p in ps if p["plan_type"] == "fixed" and not p["unlimited"])
        check(nfixed >= 4, "%s: fewer than 4 fixed plans" % cc)
    for slug in BUNDLE_SLUGS:
        n = sum(1 for p in plans if p["country_code"] is None and p["region"] == slug)
        check(4 <= n <= 6, "bundle %s has %d plans" % (slug, n))
    nglobal = sum(1 for p in plans if p["global"])
    check(4 <= nglobal <= 5, "global plans %d" % nglobal)

    sandbox = [p for p in plans if p["sandbox_only"]]
    check(sorted(p["id"] for p in sandbox) == sorted(i for i, _ in SANDBOX),
          "sandbox plans wrong")
    for p in sandbox:
        check(p["list_price_cents"] == 500 and p["cost_floor_cents"] == 300
              and p["data_amount_mb"] == 1024 and p["duration_days"] == 7
              and p["networks"] is None and p["active"] and p["country_code"] is None,
              "%s: sandbox fields" % p["id"])

    unsellable = [p["id"] for p in plans if p["cost_floor_cents"] > p["list_price_cents"]]
    check(sorted(unsellable) == sorted(UNSELLABLE_IDS),
          "unsellable plans: %r" % unsellable)
    inactive = [p["id"] for p in plans if not p["active"]]
    check(sorted(inactive) == sorted(INACTIVE_IDS), "inactive plans: %r" % inactive)
    check(5 <= len(inactive) <= 10, "inactive count")

    deep = [p for p in plans
            if 0.82 <= p["cost_floor_cents"] / p["list_price_cents"] <= 0.95]
    normal = [p for p in plans if not p["sandbox_only"]
              and 0.55 <= p["cost_floor_cents"] / p["list_price_cents"] <= 0.80]
    other = len(plans) - len(deep) - len(normal) - len(unsellable) - len(sandbox)
    check(other == 0, "%d plans with floor outside the planned bands" % other)
    deep_share = len(deep) / len(plans)
    check(0.06 <= deep_share <= 0.10, "deep-discount share %.3f" % deep_share)
    null_nets = sum(1 for p in plans if p["networks"] is None)
    null_share = null_nets / len(plans)
    check(0.13 <= null_share <= 0.17, "networks-null share %.3f" % null_share)
    check(1000 <= len(plans) <= 1400, "plan count %d" % len(plans))

    if errors:
        for e in errors[:50]:
            print("ERROR:", e, file=sys.stderr)
        print("%d validation error(s)" % len(errors), file=sys.stderr)
        sys.exit(1)

    print("destinations:        %d" % len(dests))
    print("plans:               %d" % len(plans))
    print("  country plans:     %d" % sum(1 for p in plans if p["country_code"]))
    print("  regional bundles:  %d" % sum(1 for p in plans if p["country_code"] is None
                                          and p["region"] in BUNDLE_SLUGS))
    print("  global bundles:    %d" % nglobal)
    print("  sandbox:           %d" % len(sandbox))
    print("  unlimited:         %d" % sum(1 for p in plans if p["unlimited"]))
    print("  daily:             %d" % sum(1 for p in plans if p["plan_type"] == "daily"))
    print("  with voice:        %d" % sum(1 for p in plans if p["voice_minutes"]))
    print("networks null:       %d (%.1f%%)" % (null_nets, 100 * null_share))
    print("floor 82-95%% list:  %d (%.1f%%)" % (len(deep), 100 * deep_share))
    print("unsellable:          %d %s" % (len(unsellable), sorted(unsellable)))
    print("inactive:            %d %s" % (len(inactive), sorted(inactive)))


def main():
    cat = build()
    validate(cat)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(cat, f, ensure_ascii=False, indent=2)
        f.write("\n")
    # Re-read what was written and validate once more.
    with open(OUT, encoding="utf-8") as f:
        validate(json.load(f))
    print("wrote %s" % os.path.relpath(OUT, ROOT))


if __name__ == "__main__":
    main()
