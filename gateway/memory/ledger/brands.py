"""Makes and models that name a vehicle or a device on their own ("picked up a secondhand Leaf", "just
bought an iPhone 15"): part of the lexicon (lexicon.py), kept here because the lists are long.

General knowledge, not any person's words: the common makes of cars, motorbikes and bicycles sold in
English-speaking countries and their best-known models, and the common phones, tablets, laptops, watches,
e-readers and consoles. Matched case-sensitively (a make is written capitalised; "a leaf", "golf" and "a
focus" name nothing), and only where the person says they have, got or drive one (values.py's thing
rules), so a make said in passing ("Ford's profits") gives no statement. Words that are also ordinary
capitalised words at the start of a sentence ("Up", "Switch", "Discovery") are left out.
"""

from __future__ import annotations

import re

VEHICLE_MAKES = (
    "Toyota Honda Ford Nissan Tesla BMW Audi Mercedes Mercedes-Benz Volkswagen VW Skoda Škoda Kia Hyundai Mazda "
    "Subaru Volvo Fiat Peugeot Renault Citroen Citroën Vauxhall Opel Jeep Porsche Lexus Polestar Dacia Seat SEAT "
    "Cupra Suzuki Mitsubishi Chevrolet Chevy Dodge Jaguar Land-Rover Range-Rover Alfa-Romeo BYD Rivian Lucid "
    "Ducati Vespa Yamaha Kawasaki Triumph Harley Harley-Davidson Brompton Trek Cannondale Raleigh Boardman "
    "VanMoof"
).split()
VEHICLE_MODELS = (
    "Corolla Yaris Prius Camry RAV4 Aygo Auris C-HR Civic Jazz Accord CR-V HR-V Fiesta Focus Puma Kuga Mondeo "
    "Mustang Transit Leaf Micra Qashqai Juke Golf Polo Passat Tiguan T-Roc Octavia Fabia Superb Kodiaq Enyaq "
    "Clio Zoe Megane Captur Corsa Astra Mokka Ioniq Kona Tucson i10 i20 i30 Sportage Picanto Niro Ceed EV6 "
    "Swift Vitara Outback Forester Impreza MX-5 CX-5 CX-30 Mazda3 XC40 XC60 XC90 V60 Evoque Beetle Zafira "
    "Berlingo Sandero Duster Model-3 Model-Y Model-S Model-X ID.3 ID.4 Wrangler Cherokee Panda Punto Insignia"
).split()
# mobile networks: "a Vodafone contract" is a phone's, "my contract at Deloitte" is work's
PHONE_NETWORKS = (
    "Vodafone EE O2 Three Giffgaff Tesco-Mobile Sky-Mobile Lebara Lycamobile iD-Mobile Smarty Voxi Virgin-Mobile "
    "BT-Mobile Verizon AT&T T-Mobile Sprint Rogers Bell Telus Fido Koodo Optus Telstra Eir Meteor Jio Airtel"
).split()
# model or make → what kind of device it is (the qualifier of the subject `device`)
DEVICES = {
    "iPhone": "phone",
    "Pixel": "phone",
    "Galaxy": "phone",
    "Fairphone": "phone",
    "OnePlus": "phone",
    "Xperia": "phone",
    "iPad": "tablet",
    "MacBook": "laptop",
    "ThinkPad": "laptop",
    "Chromebook": "laptop",
    "XPS": "laptop",
    "iMac": "computer",
    "Kindle": "e-reader",
    "Kobo": "e-reader",
    "Apple-Watch": "watch",
    "Fitbit": "watch",
    "Garmin": "watch",
    "PlayStation": "console",
    "Xbox": "console",
    "Steam-Deck": "console",
}
DEVICE_NOUNS = ("phone", "laptop", "tablet", "smartwatch", "watch", "e-reader", "computer", "console")


def _alternation(names: list[str] | tuple[str, ...]) -> str:
    """One alternation of the names, longest first; a hyphen is a hyphen or a space ("Land Rover", "CR-V")."""
    return "|".join(re.escape(n).replace(r"\-", "[ -]") for n in sorted(set(names), key=len, reverse=True))


# A make or model written as it is named (case-sensitive inside the lexicon's case-blind cues).
VEHICLE_NAMES = rf"(?-i:(?:{_alternation(VEHICLE_MAKES + VEHICLE_MODELS)}))"
NETWORK_NAMES = rf"(?-i:(?:{_alternation(PHONE_NETWORKS)}))"
DEVICE_NAMES = rf"(?-i:(?:{_alternation(list(DEVICES))}))s?"  # "an iPhone 15", "two iPads"


def hint_words(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The lexicon's hints of the names (a clause holding none is not searched): each name lowercased as one
    word ("cr-v", "mazda3") and its first part ("land" of "Land Rover", "id" of "ID.3")."""
    out: set[str] = set()
    for n in names:
        low = n.lower()
        out.add(re.split(r"[ .-]", low)[0])
        if "." not in low:
            out.add(low)
    return tuple(sorted(out))


_DEVICE_KIND = {re.split(r"[ -]", k)[0].lower(): v for k, v in DEVICES.items()}


def device_kind(cue: str) -> str:
    """Which device a cue names: "iPhone 15" → phone, "new laptop" → laptop ("" when none)."""
    for w in cue.lower().split():
        if w in DEVICE_NOUNS:
            return "watch" if w == "smartwatch" else w
        for name, kind in _DEVICE_KIND.items():
            if w.startswith(name):
                return kind
    return ""
