"""The dialogue-act layer: segments and acts of agent messages (domain-agnostic)."""

from __future__ import annotations

from pytest_quantagent.env.dialogue import (
    Act,
    acknowledges,
    classify,
    options_before,
    read,
    retype,
    segments,
    strip_keep,
    strip_markdown,
    understood,
    vague,
)


def acts(text: str) -> list[tuple[str, str]]:
    return [(s.act.value, s.text) for s in read(text)]


def test_markdown_lists_and_headers_become_segments() -> None:
    assert strip_markdown("**Airplane Mode** is `on` — see [docs](http://x)") == (
        "Airplane Mode is on — see docs")
    text = "Thanks!\n\nPlease provide:\n- Your **full name**\n2. Your zip code\n\nAnything else?"
    assert segments(text) == [
        ("Thanks!", ""), ("Please provide:", ""), ("Your full name", "Please provide:"),
        ("Your zip code", "Please provide:"), ("Anything else?", ""),
    ]
    # Items of a request header are asked; items of a recap are statements.
    asked = read(text)
    assert [s.act for s in asked[2:4]] == [Act.REQUEST, Act.REQUEST]
    recap = read("Here's what we did:\n1. Reset the APN settings\n2. Restarted your phone")
    assert [s.act for s in recap] == [Act.STATEMENT] * 3 and all(s.past for s in recap)


def test_sentences_and_clauses_split_where_they_do_different_things() -> None:
    parts = read("Airplane mode doesn't seem to be on, so let's check the SIM. Costs are $80.50 today.")
    assert [s.text for s in parts] == [
        "Airplane mode doesn't seem to be on", "let's check the SIM.", "Costs are $80.50 today."]
    assert parts[0].negated and parts[0].act == Act.STATEMENT
    assert parts[1].act == Act.REQUEST and parts[1].check and not parts[1].negated


def test_each_act() -> None:
    cases = {
        "Please restart your phone.": Act.REQUEST,
        "Could you restart your phone now?": Act.REQUEST,
        "Could you tell me whether Wi-Fi calling is on?": Act.QUESTION,
        "Are you travelling abroad at the moment?": Act.QUESTION,
        "Would you like me to send a payment request for $80?": Act.OFFER,
        "Do you confirm that I should proceed?": Act.OFFER,
        "Would you like the refund on PayPal or on a gift card?": Act.QUESTION,
        "Which item would you like to exchange?": Act.QUESTION,
        "I'm sorry you can't send picture messages.": Act.STATEMENT,
        "Earlier we confirmed mobile data is on.": Act.STATEMENT,
        "I've reset your APN settings.": Act.STATEMENT,
        "I'm transferring you to a human agent now.": Act.TRANSFER,
        "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON.": Act.TRANSFER,
        "I can transfer you to a human agent if you prefer.": Act.STATEMENT,
        "Is there anything else I can help you with?": Act.CLOSING,
        "Have a wonderful day!": Act.CLOSING,
        "Hi! How can I help you today?": Act.GREETING,
        "Please note that an order can only be modified once.": Act.STATEMENT,
    }
    got = {t: classify(t).act for t in cases}
    assert got == cases


def test_modifiers() -> None:
    assert classify("Please don't restart your phone yet.").negated
    assert not classify("Don't forget to restart your phone.").negated
    when = classify("When you are back home, turn roaming off.")
    assert when.conditional and when.act == Act.REQUEST
    assert not classify("When you're ready, take the SIM card out.").conditional
    assert classify("Could you check whether Wi-Fi calling is turned on?").check
    assert not classify("Please turn Wi-Fi on and tell me if it connects.").check
    assert classify("Is your phone set to 2G, 3G or 4G?").either_or


def test_transfers_that_are_not_happening_now() -> None:
    assert classify("I don't want to transfer you before we've tried the basics.").act != Act.TRANSFER
    assert classify("Before I transfer you, I'll need to verify your identity.").act != Act.TRANSFER
    assert classify("Unfortunately I can't fix this here, so I'm transferring you now.").act == Act.TRANSFER
    # An option followed by a choice question is an offer.
    parts = read("I can change the plan myself, or transfer you to a human agent. Which would you like?")
    assert parts[0].act == Act.OFFER and parts[0].either_or


def test_conditions_the_user_can_judge_now() -> None:
    from pytest_quantagent.env.dialogue import condition

    assert condition("If it is, switch it off") == ("if", "it is", "switch it off")
    assert condition("Once that's set, run a speed test") == ("once", "that's set", "run a speed test")
    # The user's situation or an outcome to come: never acted on.
    assert condition("When you're back home, turn data roaming off") is None
    assert condition("If that doesn't work, reset the APN settings") is None
    assert condition("Please restart your phone") is None
    # "tell me if" asks about what is; it is not a condition.
    assert not classify("Could you tell me if you're connected to a VPN?").conditional


def test_a_wh_clause_before_a_dash_asks_too() -> None:
    parts = read("Before I check the order, what's the reason for cancelling — no longer needed or ordered by mistake?")
    assert parts[0].act == Act.QUESTION and parts[0].text.endswith("?")


def test_tables_reasons_contrasts_and_more_ways_to_transfer() -> None:
    # Table rows are items of the header above them; the separator row and the column names
    # above it go.
    parts = read("Please verify with:\n\n| Option | What |\n|---|---|\n| A | Email address |")
    assert [s.text for s in parts] == ["Please verify with:", "A Email address"]
    assert parts[1].asks
    # A reason before ", please" is not part of the request (its negation does not negate it).
    parts = read("Since your SIM isn't detected, please take the SIM out and put it back in.")
    assert [(s.act, s.negated) for s in parts] == [(Act.STATEMENT, True), (Act.REQUEST, False)]
    # What to do instead after a negated request is asked.
    parts = read("Please don't include your old address — just the new one.")
    assert parts[0].negated and parts[1].act == Act.REQUEST and not parts[1].negated
    opening = classify("Before anything else, do you see a payment request?")
    assert opening.act != Act.CLOSING and opening.asks
    assert classify("Would you still prefer that I transfer you to a human agent?").act == Act.OFFER
    assert classify("I'll get you over to a human agent right away.").act == Act.TRANSFER
    assert classify("I'll connect you with one of our human agents.").act == Act.TRANSFER
    # The items under "Please review:" are shown, not asked.
    assert read("Please review:\n- Webcam 4K → Webcam 1080p")[1].act == Act.STATEMENT


def test_a_leaked_reasoning_block_asks_for_nothing() -> None:
    # Qwen3 without a reasoning parser leaks "<think>…</think>" into the content; an
    # imperative inside it is the model talking to itself, not a request to the user.
    msg = ("<think>The user can't get data. I'll ask them: please turn on airplane mode "
           "and restart your phone.</think>\n\nThanks for waiting! Could you tell me the phone "
           "number on your account?")
    acts = [(s.text, s.act) for s in read(msg)]
    assert acts == [("Thanks for waiting!", Act.STATEMENT),
                    ("Could you tell me the phone number on your account?", Act.QUESTION)]
    # Unclosed (the reply was cut inside the block): nothing after "<think>" is said.
    assert [s.act for s in read("Sure.<think>Please reset the APN settings")] == [Act.STATEMENT]


def test_a_request_run_on_into_a_confirmation_is_two_acts() -> None:
    # A degraded model fused "Please make the payment for the request I sent you." and "Do you
    # confirm that I should proceed?": the user is asked to pay *and* to confirm.
    msg = "Please make the payment for the request I sent you confirm that I should proceed?"
    assert [(s.text, s.act) for s in read(msg)] == [
        ("Please make the payment for the request I sent you", Act.REQUEST),
        ("confirm that I should proceed?", Act.OFFER)]
    # A request that only mentions confirming stays one request.
    assert [s.act for s in read("Please restart your phone and confirm that you see signal.")] == [
        Act.REQUEST]


def test_keep_and_leave_phrases_ask_for_no_change() -> None:
    assert strip_keep("Please run a speed test (keep data roaming on).") == "Please run a speed test."
    assert strip_keep("Please leave data roaming on and restart your phone.") == "Restart your phone."
    assert strip_keep("Turn off Data Saver (but leave mobile data on).") == "Turn off Data Saver."
    # "keep in mind" keeps no state.
    assert strip_keep("Keep in mind that roaming costs extra.") == "Keep in mind that roaming costs extra."
    assert [s.act for s in read("Leave roaming on — it's needed abroad.")] == []


def test_a_heading_without_colon_heads_its_list() -> None:
    msg = "### Summary\n- Reset your APN settings\n- Restarted your phone\n\nAnything else?"
    acts = [(s.text, s.act, s.past) for s in read(msg)]
    assert ("Reset your APN settings", Act.STATEMENT, True) in acts
    assert acts[-1][1] == Act.CLOSING


def test_the_layer_says_whether_it_found_something_to_act_on() -> None:
    assert vague("Can you do that for me?") and vague("Please check it.")
    assert not vague("Please check the APN settings.")
    assert not understood(read("Could you do this step for me?"))
    assert not understood(read("Let me look into that."))
    assert understood(read("Could you restart your phone?"))
    assert understood(read("Is there anything else I can help you with?"))
    # Nothing asked, but nothing to clarify either: the agent works or has what it needs.
    for msg in ("That's all the info I need.", "Let me look into that.",
                "Perfect, I have everything I need. Give me a moment.", "One moment please while I check."):
        assert acknowledges(read(msg)) and not understood(read(msg)), msg
    for msg in ("Your order contains a tent.", "Can you do that for me?", "Is there anything else?"):
        assert not acknowledges(read(msg)), msg


def test_purpose_and_reason_clauses() -> None:
    # ", so you can ..." is the offer's purpose, not a clause of its own; the offer keeps its "?".
    offer = read("Would you like me to cancel the whole order instead, so you can reorder the bag?")
    assert [s.act for s in offer] == [Act.OFFER]
    split = read("Would you like me to switch you to Unlimited, so this never happens again?")
    assert split[0].act == Act.OFFER and split[0].text.endswith("?")
    # The reason's negation is not the question's.
    asked = read("Since you don't have your email handy, could you give me your full name instead?")
    assert asked[-1].act in (Act.REQUEST, Act.QUESTION) and not asked[-1].negated
    # ", and let me know what it shows": a check of its own after the change.
    two = read("Please restart your phone so it reconnects, and let me know what your status bar shows.")
    assert [(s.act, s.check) for s in two] == [(Act.REQUEST, False), (Act.REQUEST, True)]


def test_agreement_asked_in_other_words_is_an_offer() -> None:
    for msg in ("Reply *yes* to proceed.", 'Can you confirm with a "yes" so I can submit it?',
                "Good to go?", "Are we good to go?", "Would you be interested in upgrading your plan?",
                "Just type YES and I'll submit it."):
        assert Act.OFFER in [s.act for s in read(msg)], msg


def test_options_under_a_header_are_told_when_a_choice_follows() -> None:
    msg = "Options:\n1. Keep the current payment method\n2. Switch to a different card\n\nWhich would you prefer?"
    parts = read(msg)
    assert [s.act for s in parts[1:3]] == [Act.STATEMENT, Act.STATEMENT]
    assert options_before(parts, 3) == ["Keep the current payment method", "Switch to a different card"]
    # Without a choice question the items are still requests.
    steps = read("Here are two ways to fix it:\n- Restart your phone\n- Reset the APN settings")
    assert [s.act for s in steps[1:]] == [Act.REQUEST, Act.REQUEST]


def test_a_transfer_later_or_instead_is_not_a_transfer() -> None:
    for msg in ("Before transferring you to a human agent, what's your name?",
                "I can process a refund myself instead of transferring you.",
                "To get you transferred to the right team, I'll first need your phone number."):
        assert Act.TRANSFER not in [s.act for s in read(msg)], msg
    assert Act.TRANSFER in [s.act for s in read("You'll be connected to a human agent shortly.")]


def test_a_tables_header_row_is_no_item() -> None:
    msg = "Here's what I can do:\n\n| Option | What it does |\n|---|---|\n| Refuel | extra GB |\n| Upgrade | more data |"
    assert segments(msg) == [("Here's what I can do:", ""), ("Refuel extra GB", "Here's what I can do:"),
                             ("Upgrade more data", "Here's what I can do:")]
    # A table without a separator keeps every row.
    assert [t for t, _ in segments("| a | b |\n| c | d |")] == ["a b", "c d"]


def test_chat_shorthand_and_typing_slips_are_read_through() -> None:
    assert retype("Helo, how cn I help yuo today?") == "Hello, how can I help you today?"
    assert retype("pls turn on data roamng on ur phone") == "please turn on data roaming on your phone"
    assert retype("name + number?") == "name and number?"
    assert retype("waht's the new adress?") == "what's the new address?"
    # Names, real words near a target, words with digits and apostrophes' tails stay as written.
    for text in ("Thanks, Ben, and Greta too.", "Fill in the form though.", "I'll check #W2778315 too.",
                 "Order 12 oz / blue, says the receipt."):
        assert retype(text) == text, text


def test_a_trailing_condition_is_read_before_its_step() -> None:
    [seg] = read("Restart your phone only if Airplane Mode is already off.")
    assert (seg.act, seg.conditional, seg.text) == (
        Act.REQUEST, True, "If Airplane Mode is already off, restart your phone.")
    [seg] = read("Please switch Wi-Fi off, but only if Airplane Mode is off.")
    assert seg.conditional and seg.text.startswith("If Airplane Mode is off,")
    # A preference exception leaves the step as the default; another stays a condition.
    [seg] = read("Disconnect your VPN unless you need it for work.")
    assert (seg.act, seg.conditional, seg.text) == (Act.REQUEST, False, "Disconnect your VPN.")
    [seg] = read("Turn on data roaming unless you're at home in the US.")
    assert seg.conditional
    # "I'll X unless you say otherwise" asks for agreement.
    [seg] = read("I'll also sign you up for our newsletter unless you say otherwise.")
    assert (seg.act, seg.text) == (Act.OFFER, "Shall I also sign you up for our newsletter?")


def test_a_negative_statement_with_a_tag_asks_its_positive() -> None:
    assert acts("You don't have Wi-Fi Calling turned on, do you?") == [
        ("question", "Do you have Wi-Fi Calling turned on?")]
    assert acts("Your status bar doesn't show the Airplane Mode icon, does it?") == [
        ("question", "Does your status bar show the Airplane Mode icon?")]
    assert acts("You haven't got Data Saver switched on, have you?") == [
        ("question", "Do you have Data Saver switched on?")]
    # What the customer has done is asked as it is.
    [seg] = read("You haven't switched Airplane Mode off yet, have you?")
    assert seg.act == Act.QUESTION and seg.text.startswith("You haven't")


def test_greetings_plans_and_goals() -> None:
    for msg in ("hello", "Good morning.", "hi, what's up?", "hey. problem?", "What would you like help with?",
                "Good day! How may I be of service?", "What's the trouble today?",
                "Anything I can sort out for you today?"):
        assert Act.GREETING in [s.act for s in read(msg)], msg
    # What may come later, and the goal of the call, are told, not asked.
    for msg in ("Depending on what you see, we may restart the phone or look at the SIM card.",
                "Let's get your picture messages working again."):
        assert [s.act for s in read(msg)] == [Act.STATEMENT], msg
    assert [s.act for s in read("Let's get you back online: please reset your APN settings.")][-1] == Act.REQUEST
    # "once we've sorted that" waits for an outcome to come.
    assert read("Also, once we've sorted that, I'll need you to send a picture message.")[0].conditional


def test_enumerations_steps_after_a_colon_and_table_step_numbers() -> None:
    assert acts("1) What's the order number? 2) Which payment method would you like to use instead?") == [
        ("question", "What's the order number?"), ("question", "Which payment method would you like to use instead?")]
    assert [a for a, _ in acts("Please: (a) turn Airplane Mode off, (b) turn mobile data on, and (c) tell me "
                               "what the status bar shows.")][-3:] == ["request", "request", "request"]
    assert acts("Last step: restart your phone.")[-1] == ("request", "restart your phone.")
    msg = "| Step | Action |\n|---|---|\n| 1 | Turn mobile data on |\n| 2 | Turn Data Saver off |"
    assert acts(msg) == [("request", "Turn mobile data on"), ("request", "Turn Data Saver off")]
    # "leave everything else the way it is" asks for no change.
    assert strip_keep("Switch off Wi-Fi Calling. Leave everything else the way it is.") == "Switch off Wi-Fi Calling."
