"""A Sift event body into a Railflow event (``EventIn`` fields), or a ``SiftError``. Pure.

Reserved ``$`` fields become the order fields Railflow's workflows and metrics read
(``customer``, ``order_id``, ``amount`` in minor units, ``currency``, ``card``, ``country``,
``shipping_address``, ``ip``, ``device``, ...); every other reserved field is kept under its
name without the ``$``; custom fields are kept as sent. The event id derives from the field the
configuration names for the type (``$order_id`` for ``$create_order``), so the same order sent
twice is one event and one run.
"""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote

import orjson

from runner.sift.codes import (
    BAD_BODY,
    BAD_FIELD_NAME,
    BAD_JSON,
    BAD_VALUE,
    MISSING_FIELD,
    NOT_RESERVED,
    SiftError,
)
from runner.sift.config import SiftSettings

body_bytes_max = 256 * 1024  # one event; the log carries it to every node
event_id_chars_max = 200  # EventIn.event_id
data_fields_max = 200  # EventIn.data
micros_per_unit = 1_000_000

# Currencies whose minor unit is not a hundredth (ISO 4217 exponents).
CURRENCY_EXPONENTS = {
    **dict.fromkeys(("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF",
                     "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}

# Top-level reserved fields this door understands; any other "$" field is rejected (105).
RESERVED = frozenset("""
$type $api_key $user_id $session_id $order_id $transaction_id $user_email $amount
$currency_code $billing_address $shipping_address $payment_methods $payment_method $ip
$browser $app $time $transaction_type $transaction_status $decline_category $seller_user_id
$expedited_shipping $shipping_method $shipping_carrier $shipping_tracking_numbers $items
$promotions $digital_orders $merchant_profile $site_domain $site_country $brand_name
$order_status $reason $source $analyst $description $name $phone $social_sign_on_type
$account_types $referrer_user_id $login_status $failure_reasons $username $status
$ordered_from $bookings $verification_phone_number $user_status $changed_password
$content_id $is_first_time_buyer $is_bad $abuse_type $verified_event $verified_entity_id
$verification_type $verified_value $receiver_wallet_address $receiver_external_address
$sent_address $received_address $account_holder_name $account_number_last5 $bank_name
$bank_country $routing_number $wallet_address $wallet_type $paypal_payer_id $card_bin
$card_last4 $triggered_3ds $three_ds $cancellation_reason $refund_method $partial
$exchange_rate $minimum_amount $transfer_id
""".split())
# Enumerated values Sift spells with a leading "$" ("$sale"): stored without it for criteria.
ENUM_FIELDS = frozenset({"$transaction_type", "$transaction_status", "$order_status",
                         "$decline_category", "$shipping_method", "$login_status",
                         "$verification_type", "$user_status", "$source"})
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_]{1,100}$")  # Sift's custom field names
ADDRESS_PARTS = ("$name", "$address_1", "$address_2", "$city", "$region", "$country",
                 "$zipcode", "$phone")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or status 56 (57 past ``body_bytes_max``)."""
    if len(raw) > body_bytes_max:
        raise SiftError(BAD_BODY, f"larger than {body_bytes_max} bytes")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise SiftError(BAD_JSON, str(exc)) from None
    if not isinstance(body, dict):
        raise SiftError(BAD_JSON, "the body must be a JSON object")
    return body


def _text(body: dict, name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise SiftError(MISSING_FIELD, name)
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise SiftError(BAD_VALUE, f"{name} must be a string")
    return str(value)


def event_type_of(sift_type: str, cfg: SiftSettings) -> str:
    mapped = cfg.event_types.get(sift_type)
    if mapped:
        return mapped
    name = "sift_" + sift_type[1:] if sift_type.startswith("$") else sift_type
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in name)[:64]
    return clean if clean[:1].isalpha() or clean[:1] == "_" else "e_" + clean[:62]


def event_id_of(sift_type: str, body: dict, cfg: SiftSettings) -> str:
    """``sift.<type>.<key>``: the configured id field's value, percent-encoded (no "/"), or
    ``=b`` and a digest of the body without its key when the type names no id field (or it
    is absent); ``=h`` and a digest of the key when the key is too long."""
    kind = sift_type.lstrip("$")
    field = cfg.id_fields.get(sift_type)
    key = _text(body, field) if field else None
    if key is None and sift_type == "$transaction":
        key = _text(body, "$order_id")  # a transaction without its own id: one per order
    if key is None:
        rest = {k: v for k, v in body.items() if k != "$api_key"}
        digest = hashlib.blake2b(orjson.dumps(rest, option=orjson.OPT_SORT_KEYS),
                                 digest_size=12).hexdigest()
        return f"sift.{kind}.=b{digest}"[:event_id_chars_max]
    out = f"sift.{kind}.{quote(key, safe='')}"
    if len(out) > event_id_chars_max:
        out = f"sift.{kind}.=h{hashlib.blake2b(key.encode(), digest_size=16).hexdigest()}"
    return out


def micros_of(value: Any) -> int:
    """``$amount`` in micros: an integer, or the one-element string array Sift's Python
    client sends for a ``Decimal`` (``["15230000"]``); fractions of a micro round half-even."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        try:
            amount = Decimal(value[0])
        except InvalidOperation:
            raise SiftError(BAD_VALUE, "$amount must be a number of micros") from None
        if not amount.is_finite():
            raise SiftError(BAD_VALUE, "$amount must be finite")
        value = int(amount.to_integral_value())
    if not isinstance(value, int) or isinstance(value, bool):
        raise SiftError(BAD_VALUE, "$amount must be an integer number of micros")
    if abs(value) >= 2**62:
        raise SiftError(BAD_VALUE, "$amount is out of range")
    return value


def minor_units(micros: int, currency: str | None) -> int:
    """Micros to the currency's minor units (cents for USD), rounded half-even."""
    exponent = CURRENCY_EXPONENTS.get((currency or "USD").upper(), 2)
    scaled = Decimal(micros) * (10 ** exponent) / micros_per_unit
    return int(scaled.to_integral_value())


def _strip(value: Any, depth: int = 0) -> Any:
    """Nested reserved keys lose their "$" so criteria can read them (``event.items``)."""
    if depth > 8:
        return None
    if isinstance(value, dict):
        return {(k[1:] if k.startswith("$") else k): _strip(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_strip(v, depth + 1) for v in value]
    return value


def _address(value: Any, name: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SiftError(BAD_VALUE, f"{name} must be an object")
    return {p: str(value[p]) for p in ADDRESS_PARTS if value.get(p) not in (None, "")}


def _address_key(parts: dict[str, str]) -> str:
    """One string per address (lowercased), so metrics can count distinct addresses."""
    keys = ("$address_1", "$address_2", "$city", "$region", "$zipcode", "$country")
    return "|".join(parts.get(k, "").strip().lower() for k in keys)


def _payment_method(body: dict) -> dict | None:
    methods = body.get("$payment_methods")
    if methods is not None:
        if not isinstance(methods, list) or not all(isinstance(m, dict) for m in methods):
            raise SiftError(BAD_VALUE, "$payment_methods must be an array of objects")
        return methods[0] if methods else None
    method = body.get("$payment_method")
    if method is not None and not isinstance(method, dict):
        raise SiftError(BAD_VALUE, "$payment_method must be an object")
    return method


def _order_fields(body: dict, data: dict) -> None:
    """The reserved fields Railflow's order workflows and metrics read, by their names."""
    currency = _text(body, "$currency_code")
    if currency is not None:
        data["currency"] = currency.upper()
    if body.get("$amount") is not None:
        micros = micros_of(body["$amount"])
        data["amount_micros"] = micros
        data["amount"] = minor_units(micros, currency)
    billing = _address(body["$billing_address"], "$billing_address") \
        if body.get("$billing_address") is not None else {}
    shipping = _address(body["$shipping_address"], "$shipping_address") \
        if body.get("$shipping_address") is not None else {}
    if shipping:
        data["shipping_address"] = _address_key(shipping)
        data["shipping_country"] = shipping.get("$country", "").upper()
    if billing:
        data["billing_address"] = _address_key(billing)
        data["billing_country"] = billing.get("$country", "").upper()
    country = billing.get("$country") or shipping.get("$country") or body.get("$site_country")
    if country:
        data["country"] = str(country).upper()
    if billing.get("$region") or shipping.get("$region"):
        data["region"] = billing.get("$region") or shipping.get("$region")
    method = _payment_method(body)
    if method:
        card_bin, last4 = method.get("$card_bin"), method.get("$card_last4")
        if card_bin is not None:
            data["card_bin"] = str(card_bin)
        if last4 is not None:
            data["card_last4"] = str(last4)
        if card_bin is not None or last4 is not None:
            data["card"] = f"{card_bin or ''}:{last4 or ''}"
        for part in ("$payment_type", "$payment_gateway"):
            if isinstance(method.get(part), str):
                data[part[1:]] = method[part].lstrip("$")
    browser, app = body.get("$browser"), body.get("$app")
    if isinstance(browser, dict) and browser.get("$user_agent"):
        data["user_agent"] = str(browser["$user_agent"])
    if isinstance(app, dict) and app.get("$device_unique_id"):
        data["device"] = str(app["$device_unique_id"])


def to_event(body: dict, cfg: SiftSettings) -> tuple[str, dict[str, Any]]:
    """``(sift_type, event)`` where ``event`` has ``EventIn``'s fields. Raises ``SiftError``
    (55 missing field, 105 unknown reserved field, 53 bad value)."""
    sift_type = _text(body, "$type", required=True)
    user_id = _text(body, "$user_id")
    session_id = _text(body, "$session_id")
    if user_id is None and session_id is None:
        raise SiftError(MISSING_FIELD, "$user_id (or $session_id)")
    unknown = sorted(k for k in body if k.startswith("$") and k not in RESERVED)
    if unknown:
        raise SiftError(NOT_RESERVED, ", ".join(unknown)[:300])
    bad = sorted(k for k in body if not k.startswith("$") and not _FIELD_NAME.match(k))
    if bad:
        raise SiftError(BAD_FIELD_NAME, ", ".join(repr(k) for k in bad)[:300])
    data: dict[str, Any] = {}
    for key, value in body.items():  # custom fields first: reserved meanings win below
        if not key.startswith("$") and value is not None:
            data[key] = _strip(value)
    for key, value in body.items():
        if key.startswith("$") and key not in ("$api_key", "$type") and value is not None:
            if key in ENUM_FIELDS and isinstance(value, str):
                value = value.lstrip("$")
            data[key[1:]] = _strip(value)
    if user_id is not None:
        data["customer"] = user_id
    if _text(body, "$order_id") is not None:
        data["order_id"] = _text(body, "$order_id")
    _order_fields(body, data)
    if "merchant" not in body:
        data["merchant"] = _text(body, "$seller_user_id") or cfg.default_merchant
    if len(data) > data_fields_max:
        raise SiftError(BAD_VALUE, f"at most {data_fields_max} fields per event")
    ts = body.get("$time")
    event = {"event_id": event_id_of(sift_type, body, cfg),
             "type": event_type_of(sift_type, cfg), "data": data}
    if isinstance(ts, int) and not isinstance(ts, bool) and 0 <= ts <= 2**62:
        event["ts"] = ts
    return sift_type, event
