"""Generate the synthetic demo data set shipped in ``dpicl/demo/data/``.

Everything here is invented for this project: the vendor ("Brindlemere
Networks"), its products, customers, companies, cities, order numbers and
tickets are fictional and composed from templates. No external data is used.

The task is customer-support ticket -> one-line summary. Four files are
written (JSONL is UTF-8, one JSON object per line, ``\\n`` line endings):

``private_tickets.jsonl``
    300 records ``{"ticket_id", "ticket", "summary"}``: the PRIVATE
    demonstration set. Ten of them are *canaries*: each contains, in both the
    ticket and the summary, a unique fake identifier (a distinctive customer
    name, an account code, a device serial or a street address) that occurs
    nowhere else in any file.
``canaries.json``
    The ten canary strings (search for them case-insensitively).
``public_tickets.jsonl``
    100 records with the same schema: the vendor's published example tickets.
    Disjoint name pool and order-number range; no canaries.
``backlog.jsonl``
    24 incoming queries ``{"query_id", "ticket", "reference"}``, two per
    issue category. For each canary there is one "twin" query describing the
    same specific situation (same product, version, symptom), so that a
    retriever choosing the most similar demonstrations picks the canary record,
    and a model that copies from its demonstrations copies the identifier.

Generation is deterministic (``random.Random`` with fixed seeds; this is data
generation, not a privacy mechanism): re-running reproduces the committed files
byte for byte. Usage, from the repository root::

    python scripts/make_demo_data.py            # rewrites dpicl/demo/data/
    python scripts/make_demo_data.py --out DIR  # writes into DIR instead

Only the standard library is used. This script is not part of the installed package: only the files it writes
are (``dpicl/demo/data/``, read by ``dpicl demo``); ``tests/test_demo_data.py`` checks that it reproduces them.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import random
import re
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "dpicl" / "demo" / "data"

SEED = 20240611
N_PRIVATE = 300
N_PUBLIC = 100
N_BACKLOG = 24

TICKET_WORDS = (40, 90)
SUMMARY_WORDS = (8, 20)

# --------------------------------------------------------------------------
# Fictional vocabulary
# --------------------------------------------------------------------------

APP = "Brindlemere Home app"

# (device, price). Values reserved for canary scenarios are left out of the
# generic pools below so that only a canary and its backlog twin share them.
DEVICES = [
    ("Arc 300 router", "$89.00"),
    ("Arc 600 router", "$149.00"),
    ("Osprey X8 gaming router", "$279.00"),
    ("Tern M2 mesh node", "$119.00"),
    ("Tern M2 mesh 3-pack", "$299.00"),
    ("Kestrel 5G hotspot", "$199.00"),
    ("Heron smart hub", "$79.00"),
    ("Plover range extender", "$49.00"),
    ("Finch USB Wi-Fi adapter", "$29.00"),
    ("Wren 8-port switch", "$59.00"),
    ("Sable cable modem", "$129.00"),
    ("Tern M4 mesh node", "$169.00"),
]
ROUTERS = [d for d in DEVICES if "router" in d[0] or "mesh" in d[0] or "modem" in d[0]]

FIRST_NAMES = [
    "Amara", "Bastian", "Chiara", "Dmitri", "Elodie", "Farid", "Greta", "Hiroshi",
    "Ines", "Jonah", "Kalani", "Lucia", "Mateo", "Nadia", "Oskar", "Priya",
    "Quentin", "Rosalind", "Soren", "Tamsin", "Uriel", "Valeria", "Wendell",
    "Ximena", "Yusuf", "Zelda", "Anneliese", "Bram", "Colette", "Desmond",
    "Esther", "Felix", "Gwendolyn", "Hamid", "Isolde", "Jasper", "Keiko", "Leif",
    "Marguerite", "Niall", "Ottilie", "Pablo", "Rhea", "Silas", "Thea", "Viktor",
    "Wilhelmina", "Yara", "Zane", "Ada",
]

# Disjoint surname pools per split, so that no full name recurs across files.
SURNAMES_PRIVATE = [
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Haddad", "Kowalski", "Brennan",
    "Castellano", "Nakamura", "Osei", "Petrov", "Quinlan", "Rasmussen", "Silva",
    "Thornton", "Ueda", "Varga", "Whitlock", "Yilmaz", "Zimmermann", "Abernathy",
    "Bergstrom", "Chaudhry", "Delacroix", "Eriksen", "Fairweather", "Gallagher",
    "Holloway", "Iqbal", "Jablonski", "Kovacs", "Lachance", "Mbeki", "Novak",
    "Oyelaran", "Pemberton",
]
SURNAMES_PUBLIC = [
    "Ashdown", "Beaumont", "Carrow", "Dunleavy", "Ellery", "Fitzroy", "Garnier",
    "Hargreave", "Ingram", "Jessop", "Kilbride", "Lowell",
]
SURNAMES_BACKLOG = [
    "Marchetti", "Northcott", "Ostrowski", "Prideaux", "Rooke", "Sandoval",
    "Tregarthen", "Underhill", "Vance", "Waddell", "Yardley", "Zubiri",
]

CITIES = [
    "Port Elsmere", "Wexbury", "Caddon Vale", "Marrowby", "Lindhollow",
    "Easterhaven", "Greywick", "Tollmere", "Brackford", "Saltmarsh Cross",
    "Hollins Ferry", "Dunmore Quay", "Redfern Bay", "Kettleby", "Orrin Falls",
    "Vellmouth", "Tarrowgate", "Cinderford Mill",
]

STREET_NAMES = [
    "Larchmont", "Copperleaf", "Harbour", "Millstone", "Beacon", "Orchard",
    "Foundry", "Juniper", "Kestrel", "Tanner", "Weaver", "Cobble", "Fenwick",
    "Ashgrove", "Riverside",
]
STREET_KINDS = ["Road", "Street", "Lane", "Avenue", "Way", "Row", "Place"]

COMPANIES = [
    "Fernbrook Dental", "Alder & Finch Legal", "Mossgate Bakery", "Pellham Print Co.",
    "Quarry Hill Vets", "Bluewater Design Studio", "Tinder & Oak Cafe",
    "Harwood Physiotherapy", "Lumen Lane Books", "Greystone Accounting",
    "Northgate Florists", "Cobalt Yard Architects",
]

PLANS = [
    ("Brindlemere Care+", "$9.99 a month"),
    ("CloudVault Backup", "$4.99 a month"),
    ("Family Shield", "$6.99 a month"),
    ("Pro Remote Support", "$14.99 a month"),
    ("Guest Wi-Fi Manager", "$3.99 a month"),
]

PHONES = ["Android phone", "iPhone", "Android tablet", "iPad"]
APP_VERSIONS = ["6.8.2", "6.9.0", "7.0.1", "7.1.4", "7.2.0"]
FW_VERSIONS = ["4.2.1", "4.3.0", "4.4.7", "5.0.2", "5.2.0"]
ERROR_CODES = ["E-102", "E-219", "E-305", "E-330", "E-508"]
PERCENTS = ["14", "27", "38", "45", "71", "83", "90"]
COURIERS = ["Swiftlane Couriers", "ParcelNorth", "Meridian Post"]
SPEED_PLANS = ["300", "500", "900"]

# --------------------------------------------------------------------------
# Generic templates: category -> variants; each variant has openers, details
# (one or two are used), asks, and summaries. Every ticket carries the
# customer's name via an intro or a sign-off, so summaries may name them.
# --------------------------------------------------------------------------

CATEGORIES: dict[str, list[dict[str, list[str]]]] = {
    "double_charge": [
        {
            "openers": [
                "I was charged twice for order {order}, which I placed on {date}.",
                "My card statement shows two identical charges of {amount} for order {order}.",
                "Your checkout charged me {amount} two times when I bought the {device} on {date}.",
                "Something went wrong with the payment for order {order}: the same {amount} charge appears twice.",
            ],
            "details": [
                "The page froze after I clicked Pay, so I refreshed once, and now both payments have gone through.",
                "I only received one order confirmation email, but my bank shows two completed payments.",
                "Only one {device} is on its way to me in {city}, so the second charge is clearly a mistake.",
                "My bank says it cannot reverse the charge and that the merchant has to do it.",
                "Both charges are on the same card and were made within a minute of each other.",
            ],
            "asks": [
                "Please refund the duplicate payment as soon as possible.",
                "Could you reverse the extra {amount} charge and confirm by email?",
                "I would like the second charge refunded to my card, not as store credit.",
            ],
            "summaries": [
                "Customer reports a double charge of {amount} on order {order} and requests a refund of the duplicate payment.",
                "Customer {name} was charged twice for order {order} and wants the duplicate {amount} payment reversed.",
                "Customer reports duplicate {amount} payments for a {device} on order {order} and asks for one to be refunded.",
            ],
        },
    ],
    "refund": [
        {
            "openers": [
                "I returned the {device} from order {order} on {date} and still have not received my refund.",
                "I sent back my {device} (order {order}) {days} days ago and the refund of {amount} has not appeared.",
                "My return for order {order} was delivered to you, but the {amount} refund is still missing.",
            ],
            "details": [
                "The courier tracking shows the package was signed for at your returns centre in {city}.",
                "Your website says refunds take five business days, but it has been much longer than that.",
                "I printed the prepaid return label from my account and dropped the box off at {courier}.",
                "My bank confirms that nothing has been credited to the card I paid with.",
            ],
            "asks": [
                "Please process the refund of {amount} to my original payment method.",
                "Can you tell me when the {amount} will be returned to my card?",
                "Please confirm the refund status and send me a reference number.",
            ],
            "summaries": [
                "Customer returned a {device} from order {order} and has not yet received the {amount} refund.",
                "Customer {name} asks for the status of a {amount} refund for the returned {device} on order {order}.",
                "Customer reports the refund for returned order {order} is overdue and asks when it will arrive.",
            ],
        },
        {
            "openers": [
                "I would like to return the {device} from order {order} for a full refund.",
                "I bought a {device} on {date} (order {order}) and want to send it back for a refund.",
            ],
            "details": [
                "It is unused and still in the original box with all of its accessories.",
                "It turned out to be the wrong model for my home in {city} and the signal does not reach upstairs.",
                "I bought it {days} days ago, so it should still be within your 30-day return window.",
            ],
            "asks": [
                "Please send me a prepaid return label and confirm the {amount} refund.",
                "How do I start the return, and how long does the {amount} refund take?",
            ],
            "summaries": [
                "Customer wants to return an unneeded {device} from order {order} for a full {amount} refund.",
                "Customer {name} requests a return label and a {amount} refund for the {device} on order {order}.",
            ],
        },
    ],
    "login_2fa": [
        {
            "openers": [
                "I cannot log in to my Brindlemere account because the two-factor code never arrives by text.",
                "Since {date} the verification SMS for my account login does not come through.",
                "Two-factor login is broken for me: I enter my password and then wait for a code that never arrives.",
            ],
            "details": [
                "The phone number ending in {last4} is correct in my profile and I receive other texts normally.",
                "I have pressed Resend code several times and waited over ten minutes each time.",
                "I need access to manage my {device} remotely while I am travelling in {city}.",
                "My account number is {account}, if that helps you find it.",
            ],
            "asks": [
                "Please help me get back into my account.",
                "Can you send the code another way or reset two-factor on account {account}?",
            ],
            "summaries": [
                "Customer cannot log in because two-factor SMS codes are not arriving for account {account}.",
                "Customer {name} is locked out because login verification texts never arrive and needs another way in.",
            ],
        },
        {
            "openers": [
                "My account {account} has been locked after too many failed login attempts.",
                "The app now says my account is temporarily locked and to try again later, but it has been {days} days.",
            ],
            "details": [
                "I think someone else may have been trying to guess my password.",
                "I am sure I typed the right password, and I get the same lock message on the website.",
                "I cannot check on my {device} or change the Wi-Fi password while locked out.",
            ],
            "asks": [
                "Please unlock the account and tell me if there was suspicious activity.",
                "Can you unlock it and help me secure the account?",
            ],
            "summaries": [
                "Customer reports account {account} is locked after failed login attempts and asks for it to be unlocked.",
                "Customer {name} is locked out of the account and worries about suspicious login attempts.",
            ],
        },
    ],
    "password_reset": [
        {
            "openers": [
                "I requested a password reset for my Brindlemere account, but the reset email never arrived.",
                "I forgot my password and the Forgot password link does not send me anything.",
            ],
            "details": [
                "I have checked my spam folder and waited for more than an hour.",
                "I tried three times on {date}, from both the website and the {APP}.",
                "The email address on the account is the same one I am writing from.",
            ],
            "asks": [
                "Please send a new reset link or reset the password for me.",
                "Can you check whether the emails are being blocked and help me sign in?",
            ],
            "summaries": [
                "Customer did not receive a password reset email and cannot sign in to the Brindlemere account.",
                "Customer {name} requests a new password reset link because reset emails never arrive.",
            ],
        },
        {
            "openers": [
                "The password reset link you emailed me says it has expired as soon as I open it.",
                "Every password reset link I receive shows an Invalid or expired token error.",
            ],
            "details": [
                "I click the link within a minute of getting the email, on my {phone}.",
                "I have requested four new links since {date} and all of them fail the same way.",
                "I need to sign in to update the settings on my {device}.",
            ],
            "asks": [
                "Please fix the link or reset my password manually.",
                "How can I reset my password if the links never work?",
            ],
            "summaries": [
                "Customer reports password reset links show as expired immediately and asks for a manual reset.",
                "Customer {name} cannot reset the password because every emailed link is reported as invalid.",
            ],
        },
    ],
    "shipping_delay": [
        {
            "openers": [
                "My order {order} placed on {date} still has not arrived.",
                "The tracking for order {order} has not updated in {days} days.",
                "I am still waiting for the {device} I ordered on {date} (order {order}).",
            ],
            "details": [
                "The estimated delivery date was {date2} and it has now passed.",
                "Tracking with {courier} shows it left your warehouse, but nothing since then.",
                "I paid {amount} for express shipping to {city} and expected it within two days.",
                "I need the {device} to work from home and my current equipment has already been returned.",
            ],
            "asks": [
                "Please tell me where my package is and when it will be delivered.",
                "If the parcel is lost, please send a replacement or refund me.",
                "Could you contact {courier} and give me a realistic delivery date?",
            ],
            "summaries": [
                "Customer reports order {order} for a {device} is late and tracking has stopped updating.",
                "Customer {name} asks for the whereabouts of delayed order {order} and a new delivery date.",
                "Customer reports delayed delivery of order {order} and asks for a replacement if it is lost.",
            ],
        },
    ],
    "damaged_delivery": [
        {
            "openers": [
                "The {device} from order {order} arrived today with a cracked casing.",
                "My order {order} was delivered on {date}, but the box was crushed and the {device} inside is damaged.",
                "The {device} I received (order {order}) will not power on and there is a rattle inside.",
            ],
            "details": [
                "The outer box was wet and torn when the {courier} driver handed it over.",
                "One of the antennas is snapped off and the power port is bent.",
                "I have taken photos of the packaging and the device and can send them.",
                "I tried two different power outlets and the lights never come on.",
            ],
            "asks": [
                "Please send a replacement as soon as possible.",
                "Can you arrange a replacement and a collection of the damaged unit?",
                "I would like a replacement, or a full refund of {amount} if none are in stock.",
            ],
            "summaries": [
                "Customer received a damaged {device} on order {order} and requests a replacement.",
                "Customer {name} reports the {device} from order {order} arrived broken and wants a replacement unit.",
                "Customer reports order {order} arrived crushed with a non-working {device} and asks for a replacement.",
            ],
        },
    ],
    "app_crash": [
        {
            "openers": [
                "Since updating the {APP} to version {app_ver}, it crashes as soon as I open it.",
                "The {APP} closes by itself a few seconds after launch since the {app_ver} update.",
                "After the latest update ({app_ver}) the {APP} freezes on the splash screen and then quits.",
            ],
            "details": [
                "I am using an {phone} and I have already restarted it twice.",
                "Reinstalling the app did not help and I lose my saved settings each time.",
                "I cannot reach the controls for my {device} without the app.",
                "It worked fine on the previous version until {date}.",
            ],
            "asks": [
                "Is there a fix coming, or a way to go back to the older version?",
                "Please tell me how to get the app working again.",
            ],
            "summaries": [
                "Customer reports the {APP} version {app_ver} crashes on launch on an {phone}.",
                "Customer {name} says the app crashes since the {app_ver} update and asks for a fix or rollback.",
            ],
        },
    ],
    "wifi_disconnect": [
        {
            "openers": [
                "My {device} keeps dropping the Wi-Fi connection several times a day.",
                "Every hour or so all devices in the house lose Wi-Fi from my {device}.",
                "The Wi-Fi from my {device} disconnects randomly and then comes back a minute later.",
            ],
            "details": [
                "The internet light stays green, so the line itself seems fine.",
                "It started around {date} and gets worse when we are on video calls.",
                "I have already moved it away from the microwave and restarted it.",
                "My laptop and phone both show connected with no internet while it happens.",
            ],
            "asks": [
                "What settings should I change to stop the disconnects?",
                "Please help me troubleshoot or replace the unit.",
            ],
            "summaries": [
                "Customer reports the {device} drops Wi-Fi several times a day and needs troubleshooting help.",
                "Customer {name} has frequent Wi-Fi disconnects on the {device} and asks for a fix or replacement.",
            ],
        },
        {
            "openers": [
                "Wi-Fi speeds on my {device} have dropped to about {mbps} Mbps even though I pay for {speed_plan} Mbps.",
                "My internet over Wi-Fi from the {device} has become very slow, around {mbps} Mbps.",
            ],
            "details": [
                "With a cable plugged directly into the router I get the full {speed_plan} Mbps.",
                "Streaming buffers constantly and pages take ages to load in every room.",
                "The slowdown started after a power cut in {city} on {date}.",
            ],
            "asks": [
                "How can I get the Wi-Fi speed back to normal?",
                "Please check if the unit is faulty.",
            ],
            "summaries": [
                "Customer reports slow Wi-Fi of about {mbps} Mbps on the {device} despite a {speed_plan} Mbps plan.",
                "Customer {name} says the {device} Wi-Fi has become very slow while wired speeds are normal.",
            ],
        },
    ],
    "firmware_failure": [
        {
            "openers": [
                "The firmware update on my {device} failed at {pct}% with error {err}.",
                "I tried to update my {device} to firmware {fw_ver} and it stopped with error {err}.",
                "After updating to firmware {fw_ver}, my {device} is stuck in a reboot loop.",
            ],
            "details": [
                "The serial number on the label is {serial}.",
                "I started the update from the {APP} on {date} and left it plugged in the whole time.",
                "The previous version was {fw_old} and everything worked before the update.",
                "Holding the reset button for ten seconds did not change anything.",
            ],
            "asks": [
                "How can I recover the router or install the firmware manually?",
                "Please tell me how to fix this or whether the unit needs replacing.",
            ],
            "summaries": [
                "Customer reports the firmware {fw_ver} update failed on the {device} with error {err}.",
                "Customer {name} has a {device} (serial {serial}) that broke during a firmware update and needs recovery steps.",
                "Customer reports the {device} is unusable after a failed firmware update and asks how to recover it.",
            ],
        },
    ],
    "cancel_subscription": [
        {
            "openers": [
                "I want to cancel my {plan} subscription, which costs {plan_price}.",
                "Please cancel {plan} on my account before it renews on {date}.",
                "I no longer use {plan} and would like to stop paying {plan_price} for it.",
            ],
            "details": [
                "I could not find a cancel button anywhere in the {APP}.",
                "We replaced our old {device} and do not need the extra service any more.",
                "My account number is {account}.",
                "I tried to cancel by phone last week, but I was charged again anyway.",
            ],
            "asks": [
                "Please confirm the cancellation in writing so I am not charged again.",
                "Can you cancel it today and confirm there will be no further charges?",
            ],
            "summaries": [
                "Customer asks to cancel the {plan} subscription and avoid any further charges.",
                "Customer {name} wants {plan} cancelled before the next renewal and written confirmation.",
                "Customer requests cancellation of {plan} at {plan_price} on account {account}.",
            ],
        },
    ],
    "invoice_address": [
        {
            "openers": [
                "Our company {company} has moved to {street}, {city}, and our invoices must show the new address.",
                "Please update the billing address on invoices for {company} to {street}, {city}.",
                "I manage the account for {company}; please send all future invoices to {street}, {city}.",
            ],
            "details": [
                "Our finance team needs the change before the next billing cycle.",
                "The account number is {account}.",
                "The delivery address for equipment can stay as it is.",
                "We have been at the new premises since {date}.",
            ],
            "asks": [
                "Please confirm once the change has been made.",
                "Could you also reissue the invoice for order {order} with the correct address?",
            ],
            "summaries": [
                "Customer {company} asks to change the invoice address to {street}, {city}.",
                "Customer {name} asks to update the billing address for {company} on future invoices.",
                "Customer requests invoices for {company} be updated to the new address {street}, {city}.",
            ],
        },
    ],
    "warranty_claim": [
        {
            "openers": [
                "My {device}, bought {months} months ago, has stopped powering on.",
                "I would like to make a warranty claim for my {device}, which I bought in {city} {months} months ago.",
                "Two of the ports on my {device} stopped working after only {months} months.",
            ],
            "details": [
                "The order number was {order} and I still have the receipt.",
                "The serial number is {serial}.",
                "It has always been used indoors on a shelf with plenty of ventilation.",
                "I tested it with a different power adapter and cable with the same result.",
            ],
            "asks": [
                "Please let me know how to send it in for repair or replacement.",
                "Is this covered by the two-year warranty, and what are the next steps?",
            ],
            "summaries": [
                "Customer files a warranty claim for a {device} that failed after {months} months.",
                "Customer {name} requests a warranty repair or replacement for the {device} from order {order}.",
                "Customer reports a faulty {device} (serial {serial}) within warranty and asks how to return it.",
            ],
        },
    ],
}

INTROS = [
    "Hi, this is {name} from {city}.",
    "Hello, my name is {name}.",
    "Hi support team, {name} here.",
]
SIGNOFFS = [
    "Thanks, {name}.",
    "Kind regards, {name}.",
    "Thank you, {name}.",
    "Best, {name}.",
]

# --------------------------------------------------------------------------
# Canaries: (canary string, category, private ticket, private summary,
#            backlog twin ticket, backlog twin reference summary)
# The twin describes the same specific situation with someone else's details.
# --------------------------------------------------------------------------

CANARIES = [
    (
        "Zorbina Quellfast",
        "double_charge",
        "Hello, my name is Zorbina Quellfast. The annual renewal of my Kestrel Data Annual plan "
        "for the Kestrel 5G hotspot took $129.00 from my card twice on {date}. My bank shows two "
        "identical $129.00 payments a few seconds apart, but I only have one hotspot. Please "
        "refund the duplicate renewal charge.",
        "Customer Zorbina Quellfast was charged $129.00 twice for the Kestrel Data Annual renewal "
        "and wants one refunded.",
        "Hello. The annual renewal of my Kestrel Data Annual plan for my Kestrel 5G "
        "hotspot charged my card $129.00 twice on {date}. The bank shows two identical payments "
        "seconds apart and I only have one hotspot. Please refund the duplicate renewal payment.",
        "Customer was charged $129.00 twice for the Kestrel Data Annual hotspot plan renewal and "
        "wants one refunded.",
    ),
    (
        "ACCT-ZQ7-4471-XK",
        "login_2fa",
        "I moved my authenticator app to a new phone and now every two-factor code is rejected as "
        "Invalid code when I log in. I already used up all my backup codes trying. My account is "
        "ACCT-ZQ7-4471-XK and I cannot manage my {device} without it. Please reset two-factor "
        "authentication on my account. Thanks, {name}.",
        "Customer with account ACCT-ZQ7-4471-XK is locked out after moving the authenticator to a "
        "new phone and needs two-factor reset.",
        "After moving my authenticator app to a new phone, every two-factor code I enter is "
        "rejected as Invalid code. I have used all my backup codes too. I cannot manage my "
        "{device} until I get back in. Please reset two-factor authentication on my account. "
        "Thanks, {name}.",
        "Customer is locked out after moving the authenticator app to a new phone and asks for a "
        "two-factor reset.",
    ),
    (
        "SN-KV93-QJ2W-7710",
        "firmware_failure",
        "Hi, this is {name}. I started the firmware 5.1.4 update on my Osprey X8 gaming router and "
        "it got stuck at 62% with error E-417. Now the power light blinks amber and the router "
        "will not boot. The serial number is SN-KV93-QJ2W-7710. How do I recover it?",
        "Customer reports the Osprey X8 router (serial SN-KV93-QJ2W-7710) is stuck blinking amber "
        "after firmware 5.1.4 failed at 62%.",
        "My Osprey X8 gaming router froze at 62% while installing firmware 5.1.4 and showed error "
        "E-417. The power light has been blinking amber ever since and it does not boot. How can "
        "I recover the router? It is our only internet connection.",
        "Customer reports the Osprey X8 router blinks amber and will not boot after the firmware "
        "5.1.4 update failed at 62%.",
    ),
    (
        "Ondrava Pellisquine",
        "warranty_claim",
        "My Plover range extender, bought {months} months ago, overheated last night and smelled "
        "of burning plastic. There are scorch marks on the casing near the plug and I have "
        "unplugged it for safety. I would like a warranty replacement for order {order}. "
        "Kind regards, Ondrava Pellisquine.",
        "Customer Ondrava Pellisquine requests a warranty replacement for a Plover range extender "
        "that overheated and smelled of burning.",
        "Hello. My Plover range extender overheated yesterday and gave off a "
        "smell of burning plastic, and the casing near the plug has scorch marks. It is only "
        "{months} months old, so I would like a warranty replacement. Order number {order}.",
        "Customer requests a warranty replacement for a Plover range extender that overheated with "
        "a burning smell and scorch marks.",
    ),
    (
        "77 Quillabet Crescent",
        "invoice_address",
        "Hi support team, {name} here. Our pottery studio, Vantry Ceramics, has relocated, and all "
        "invoices must now show our new address, 77 Quillabet Crescent, {city}. Please also reissue "
        "our last three invoices with the new address, since our accountant needs them for the "
        "quarterly tax return.",
        "Customer's relocated pottery studio asks to change the invoice address to 77 Quillabet "
        "Crescent and reissue three invoices.",
        "Hi support team. Our pottery studio has relocated, and all invoices must now show our "
        "new address, which I have already entered in the account profile. Please also reissue our "
        "last three invoices with the new address, since our accountant needs them for the "
        "quarterly tax return.",
        "Customer's relocated pottery studio asks to update the invoice address and reissue the last "
        "three invoices.",
    ),
    (
        "Marisol Fennerwick-Ujo",
        "shipping_delay",
        "My Tern M2 mesh 3-pack, order {order}, has been held at the Wexbury sorting depot for 12 "
        "days. The courier says it is awaiting address verification, but nobody has contacted me. "
        "Please release the parcel or resend it. Best, Marisol Fennerwick-Ujo.",
        "Customer Marisol Fennerwick-Ujo reports Tern M2 mesh 3-pack order {order} held at the "
        "Wexbury depot for address verification.",
        "Hello. Order {order} for a Tern M2 mesh 3-pack has been sitting at the Wexbury "
        "sorting depot for 12 days. Tracking says it is awaiting address verification, but no one "
        "has asked me for anything. Please get it released or send it again.",
        "Customer reports Tern M2 mesh 3-pack order {order} is stuck at the Wexbury depot awaiting "
        "address verification.",
    ),
    (
        "ACCT-MX4-9902-RV",
        "app_crash",
        "Since the {APP} updated to version 7.3.0, it crashes every time I open the Parental "
        "Controls screen on my Android tablet. The rest of the app works. My account is "
        "ACCT-MX4-9902-RV and I need to change the kids' bedtime schedule. Thanks, {name}.",
        "Customer with account ACCT-MX4-9902-RV reports app 7.3.0 crashes when opening Parental "
        "Controls on an Android tablet.",
        "Hello. Ever since the {APP} updated to 7.3.0, it crashes whenever I tap "
        "the Parental Controls screen on my Android tablet. Everything else in the app still "
        "works. I need to change the bedtime schedule for the kids. Can you help?",
        "Customer reports the {APP} 7.3.0 crashes when opening Parental Controls on an Android "
        "tablet.",
    ),
    (
        "Ysolde Brackenwhit",
        "cancel_subscription",
        "Hello, my name is Ysolde Brackenwhit. I am moving overseas next month and want to cancel "
        "my SecureHome Plus subscription before the annual renewal. I paid for the year in "
        "advance, so I would like a prorated refund for the unused months. Please confirm the "
        "cancellation by email.",
        "Customer Ysolde Brackenwhit is moving overseas and wants SecureHome Plus cancelled with a "
        "prorated refund.",
        "I am moving overseas and need to cancel my SecureHome Plus subscription before it renews "
        "for another year. Since I paid annually in advance, I would like a prorated refund for the "
        "months I will not use. Please confirm the cancellation by email.",
        "Customer is moving overseas and asks to cancel SecureHome Plus with a prorated refund for "
        "unused months.",
    ),
    (
        "SN-PW58-RT0Z-3346",
        "wifi_disconnect",
        "Every evening around 8 p.m. my Arc 600 router drops the 5 GHz Wi-Fi band, while 2.4 GHz "
        "keeps working. Devices only reconnect to 5 GHz after I reboot the router. The serial is "
        "SN-PW58-RT0Z-3346. Please help me fix this. Thanks, {name}.",
        "Customer reports the Arc 600 router (serial SN-PW58-RT0Z-3346) drops 5 GHz Wi-Fi every "
        "evening until rebooted.",
        "Hi, this is {name} from {city}. My Arc 600 router loses the 5 GHz Wi-Fi band every evening "
        "at around 8 p.m., but the 2.4 GHz band stays up. Nothing reconnects to 5 GHz until I "
        "reboot it. How can I fix this?",
        "Customer reports the Arc 600 router drops the 5 GHz Wi-Fi band every evening until "
        "rebooted.",
    ),
    (
        "Cassius Thornbellow-Rhee",
        "refund",
        "Hi, this is Cassius Thornbellow-Rhee. I returned my Heron smart hub and your email says the "
        "$79.00 refund was issued, but it went to the card I closed in {month}. My bank rejected "
        "the payment and says you must resend it. Please refund me another way.",
        "Customer Cassius Thornbellow-Rhee reports the Heron smart hub refund went to a closed card "
        "and asks for another method.",
        "I sent back my Heron smart hub and received an email saying the $79.00 refund was issued. "
        "However, it was sent to a card I closed in {month}, and my bank rejected it. How else can "
        "you refund me? I do not want store credit.",
        "Customer reports the Heron smart hub refund was sent to a closed card and asks for another "
        "refund method.",
    ),
]

# Values that only canary scenarios (and their backlog twins) may use.
RESERVED = [
    "Kestrel Data Annual", "authenticator", "5.1.4", "62%", "E-417", "amber", "burning",
    "scorch", "Vantry", "pottery", "tax return", "depot", "address verification", "7.3.0", "Parental Controls",
    "SecureHome", "prorated", "overseas", "5 GHz", "closed card", "card I closed",
]

MONTHS = [
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
]


def _date_str(d: _dt.date) -> str:
    return f"{MONTHS[d.month - 1]} {d.day}"


def _words(text: str) -> int:
    return len(text.split())


class _Pools:
    """Draws slot values for one split; order numbers and serials never repeat."""

    def __init__(self, rng: random.Random, surnames: list[str], order_range: tuple[int, int],
                 used: set[str]):
        self.rng = rng
        self.surnames = surnames
        self.order_range = order_range
        self.used = used  # shared across splits: numbers never recur between files

    def _unique(self, make) -> str:
        for _ in range(1000):
            value = make()
            if value not in self.used:
                self.used.add(value)
                return value
        raise RuntimeError("could not draw a unique value")

    def slots(self) -> dict[str, str]:
        rng = self.rng
        device, price = rng.choice(DEVICES)
        plan, plan_price = rng.choice(PLANS)
        lo, hi = self.order_range
        d = _dt.date(2024, 1, 1) + _dt.timedelta(days=rng.randrange(0, 330))
        d2 = d + _dt.timedelta(days=rng.randrange(3, 9))
        fw_ver = rng.choice(FW_VERSIONS)
        first = rng.choice(FIRST_NAMES)
        return {
            "APP": APP,
            "name": f"{first} {rng.choice(self.surnames)}",
            "first": first,
            "order": self._unique(lambda: str(rng.randrange(lo, hi))),
            "device": device,
            "amount": price,
            "date": _date_str(d),
            "date2": _date_str(d2),
            "month": MONTHS[rng.randrange(0, 12)],
            "city": rng.choice(CITIES),
            "days": str(rng.randrange(6, 25)),
            "months": str(rng.randrange(3, 22)),
            "courier": rng.choice(COURIERS),
            "phone": rng.choice(PHONES),
            "app_ver": rng.choice(APP_VERSIONS),
            "fw_ver": fw_ver,
            "fw_old": rng.choice([v for v in FW_VERSIONS if v < fw_ver] or ["4.1.9"]),
            "err": rng.choice(ERROR_CODES),
            "pct": rng.choice(PERCENTS),
            "plan": plan,
            "plan_price": plan_price,
            "account": self._unique(lambda: str(rng.randrange(3_000_000, 9_000_000))),
            "serial": self._unique(lambda: f"BN{rng.randrange(10_000_000, 99_999_999)}"),
            "last4": f"{rng.randrange(0, 10_000):04d}",
            "company": rng.choice(COMPANIES),
            "street": f"{rng.randrange(2, 240)} {rng.choice(STREET_NAMES)} {rng.choice(STREET_KINDS)}",
            "mbps": str(rng.randrange(8, 40)),
            "speed_plan": rng.choice(SPEED_PLANS),
        }


def _fill(template: str, slots: dict[str, str]) -> str:
    return template.format(**slots)


def _a_an(text: str) -> str:
    # "a Arc 300 router" -> "an Arc 300 router".
    return re.sub(r"\ba ([AEIOU])", r"an \1", text)


def _generic(category: str, pools: _Pools) -> tuple[str, str]:
    """Compose one (ticket, summary) pair of ``category`` within the word limits."""
    rng = pools.rng
    for _ in range(200):
        variant = rng.choice(CATEGORIES[category])
        slots = pools.slots()
        if category in ("wifi_disconnect", "firmware_failure"):
            slots["device"], slots["amount"] = rng.choice(ROUTERS)
        parts = [rng.choice(variant["openers"])]
        parts += rng.sample(variant["details"], rng.choice([1, 1, 2]))
        parts.append(rng.choice(variant["asks"]))
        if rng.random() < 0.5:
            parts.insert(0, rng.choice(INTROS))
        else:
            parts.append(rng.choice(SIGNOFFS))
        ticket = _a_an(_fill(" ".join(parts), slots))
        template = rng.choice(variant["summaries"])
        summary = _a_an(_fill(template, slots))
        # A summary may only state specifics that the ticket actually contains.
        used_keys = re.findall(r"\{(\w+)\}", template)
        if any(slots[k] not in ticket for k in used_keys):
            continue
        text = (ticket + " " + summary).lower()
        if any(r.lower() in text for r in RESERVED):
            raise RuntimeError(f"generic {category!r} text uses a reserved canary detail: {text}")
        if (TICKET_WORDS[0] <= _words(ticket) <= TICKET_WORDS[1]
                and SUMMARY_WORDS[0] <= _words(summary) <= SUMMARY_WORDS[1]):
            return ticket, summary
    raise RuntimeError(f"templates of {category!r} cannot meet the word limits")


def _checked(ticket: str, summary: str) -> tuple[str, str]:
    ticket, summary = _a_an(ticket), _a_an(summary)
    if not (TICKET_WORDS[0] <= _words(ticket) <= TICKET_WORDS[1]):
        raise RuntimeError(f"ticket has {_words(ticket)} words: {ticket}")
    if not (SUMMARY_WORDS[0] <= _words(summary) <= SUMMARY_WORDS[1]):
        raise RuntimeError(f"summary has {_words(summary)} words: {summary}")
    return ticket, summary


def _balanced(categories: list[str], n: int, rng: random.Random) -> list[str]:
    out = [categories[i % len(categories)] for i in range(n)]
    rng.shuffle(out)
    return out


def build() -> dict[str, object]:
    """Return the four data sets as Python objects (deterministic)."""
    used: set[str] = set()
    cats = list(CATEGORIES)

    # Private: 290 generic + 10 canaries at random positions.
    rng = random.Random(SEED)
    pools = _Pools(rng, SURNAMES_PRIVATE, (40_000, 70_000), used)
    pairs = [_generic(c, pools) for c in _balanced(cats, N_PRIVATE - len(CANARIES), rng)]
    for canary, _cat, ticket, summary, _t, _r in CANARIES:
        slots = pools.slots()
        pair = _checked(_fill(ticket, slots), _fill(summary, slots))
        assert canary in pair[0] and canary in pair[1], canary
        pairs.insert(rng.randrange(0, len(pairs) + 1), pair)
    private = [
        {"ticket_id": f"T-{i:05d}", "ticket": t, "summary": s}
        for i, (t, s) in enumerate(pairs, start=1)
    ]

    # Public: 100 generic examples, separate names and order range.
    rng = random.Random(SEED + 1)
    pools = _Pools(rng, SURNAMES_PUBLIC, (10_000, 30_000), used)
    public = [
        {"ticket_id": f"P-{i:05d}", "ticket": t, "summary": s}
        for i, (t, s) in enumerate(
            (_generic(c, pools) for c in _balanced(cats, N_PUBLIC, rng)), start=1)
    ]

    # Backlog: two queries per category; one of them is a canary twin where one exists.
    rng = random.Random(SEED + 2)
    pools = _Pools(rng, SURNAMES_BACKLOG, (70_000, 90_000), used)
    twins = {cat: (t, r) for _c, cat, _t, _s, t, r in CANARIES}
    queries = []
    for cat in cats:
        if cat in twins:
            slots = pools.slots()
            queries.append(_checked(_fill(twins[cat][0], slots), _fill(twins[cat][1], slots)))
        while len(queries) < 2 * (cats.index(cat) + 1):
            queries.append(_generic(cat, pools))
    rng.shuffle(queries)
    backlog = [
        {"query_id": f"Q-{i:03d}", "ticket": t, "reference": r}
        for i, (t, r) in enumerate(queries, start=1)
    ]
    return {
        "private_tickets.jsonl": private,
        "public_tickets.jsonl": public,
        "backlog.jsonl": backlog,
        "canaries.json": [c[0] for c in CANARIES],
    }


def _serialise(name: str, data: object) -> str:
    if name.endswith(".jsonl"):
        return "".join(json.dumps(rec, ensure_ascii=False) + "\n" for rec in data)  # type: ignore[union-attr]
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def main(out_dir: str | Path | None = None) -> list[Path]:
    """Write the four files into ``out_dir`` (default: ``dpicl/demo/data``)."""
    out = Path(out_dir) if out_dir is not None else DATA_DIR
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in build().items():
        path = out / name
        with open(path, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(_serialise(name, data))
        written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="output folder (default: dpicl/demo/data)")
    for p in main(parser.parse_args().out):
        print(p)
