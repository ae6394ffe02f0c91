"""A large, diverse, offline pool of chat-assistant user prompts for self-distillation.

Contract
--------
`build_prompt_pool(n, seed)` returns `n` distinct `PoolPrompt`s. The same `(n, seed)` always gives the
same list (order included); another seed gives another sample in another order. Prompts are split as
evenly as capacity allows over `CATEGORIES` (MT-Bench's eight categories, everyday "chat" and
HumanEval-style "code_completion", so coding plus code completion make up about 20%), and inside a
category evenly over its prompt families. Asking for more prompts than the templates can make
(`pool_capacity()`) raises ValueError.

Everything is built from the hand-written lists below: a family is one template plus the lists that fill
its slots. Enumerated slots (topics, names, styles...) make a prompt's identity, and every distinct
combination gives distinct text, so the capacity is the sum over families of the products of slot
sizes. Names, dates, amounts and numbers that only decorate a prompt are drawn from the seeded
`random.Random`. Nothing is taken from MT-Bench or HumanEval; `ngram_overlaps` is the check used to keep
it that way (no shared lower-cased 8-word sequence with either set, and no HumanEval function name).
Standard library only, no network.
"""

from __future__ import annotations

import calendar
import datetime
import functools
import itertools
import math
import os
import random
import re
import string
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CATEGORIES: tuple[str, ...] = (
    "writing", "roleplay", "reasoning", "math", "coding",
    "extraction", "stem", "humanities", "chat", "code_completion",
)


@dataclass(frozen=True)
class PoolPrompt:
    text: str
    category: str


# ----------------------------------------------------------------------------------------------------
# Shared vocabulary: people, places, organizations
# ----------------------------------------------------------------------------------------------------

NAMES = (
    "Aisha", "Ben", "Carmen", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi", "Lena",
    "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Ximena",
    "Yusuf", "Zoe", "Amara", "Bruno", "Chloe", "Diego", "Esther", "Felix", "Gita", "Hugo", "Ivy", "Jonas",
    "Keiko", "Liam", "Maya", "Nikhil", "Olga", "Pablo", "Rania", "Sam", "Tomas", "Uma", "Victor", "Wanda",
    "Yara", "Zane", "Anika", "Caleb", "Dalia", "Emil", "Fatima", "Gabriel", "Hana", "Isaac", "Julia",
    "Kenji", "Leila", "Marco", "Noor", "Oscar", "Paula", "Rafael", "Sofia", "Theo", "Valentina", "Will",
    "Xavier", "Yasmin", "Zara", "Arjun", "Bianca", "Cyrus", "Daniela", "Eli", "Freya", "Gustavo",
)
SURNAMES = (
    "Okafor", "Lindqvist", "Moreau", "Tanaka", "Haddad", "Novak", "Fernandes", "Kowalski", "Nguyen",
    "Abernathy", "Costa", "Petrov", "Mensah", "Rossi", "Schmidt", "Alvarez", "Kim", "Patel", "O'Brien",
    "Jansen", "Adeyemi", "Castillo", "Larsen", "Sato", "Dubois", "Horvat", "Quispe", "Mwangi", "Ivanova",
    "Delgado", "Fischer", "Byrne", "Nakamura", "Rahman", "Silva", "Yilmaz", "Eriksen", "Varga",
    "Chowdhury", "Brennan",
)
COMPANIES = (
    "Brightwave Labs", "Kestrel Robotics", "Tidepool Health", "Lumen Grid", "Copperleaf Foods",
    "Northstar Logistics", "Bluefin Analytics", "Quarry Software", "Maplestone Energy", "Orchid Bio",
    "Pinecrest Media", "Harbor & Vine", "Solace Audio", "Granite Peak Capital", "Fernway Travel",
    "Juniper Mobility", "Silverline Textiles", "Waypoint Maps", "Cobalt Ridge Mining", "Meadowlark Farms",
    "Ironbark Tools", "Starling Payments", "Driftwood Games", "Nimbus Cloudworks", "Redwood Learning",
    "Glasshouse Studios", "Mosaic Insurance", "Outrider Drones", "Lantern Books", "Saltmarsh Seafood",
)
CITIES = (
    "Lisbon", "Nairobi", "Osaka", "Toronto", "Melbourne", "Bogota", "Krakow", "Dublin", "Austin", "Lyon",
    "Seoul", "Accra", "Valencia", "Denver", "Hamburg", "Porto", "Auckland", "Montreal", "Chennai", "Lima",
    "Rotterdam", "Gothenburg", "Cape Town", "Manchester", "Bilbao", "Brisbane", "Tallinn", "Kyoto",
    "Marseille", "Pittsburgh", "Leeds", "Cordoba", "Vilnius", "Ottawa", "Monterrey", "Glasgow", "Calgary",
    "Turin", "Busan", "Adelaide",
)
PLACES = (
    "Lisbon", "Kyoto", "Marrakesh", "Reykjavik", "Cape Town", "Buenos Aires", "Hanoi", "Edinburgh",
    "Vancouver", "Istanbul", "the Scottish Highlands", "Patagonia", "the Amalfi Coast", "Oaxaca", "Tbilisi",
    "Seoul", "Queenstown", "Bali", "Prague", "Cartagena", "Zanzibar", "the Norwegian fjords", "Montreal",
    "Jaipur", "Santorini", "Ljubljana", "Luang Prabang", "Valparaiso", "Krakow", "the Dolomites", "Tasmania",
    "Copenhagen", "Nairobi", "Cusco", "Havana", "Porto", "Sapporo", "Galway", "Seville", "Chiang Mai",
    "Banff", "the Atacama Desert", "Tallinn", "Mexico City", "Singapore", "Petra", "the Lofoten Islands",
    "New Orleans", "Kerala", "Yellowstone", "Cappadocia", "Hobart",
)

# ----------------------------------------------------------------------------------------------------
# Modifiers shared by several categories (each starts with a space, or is empty)
# ----------------------------------------------------------------------------------------------------

EXPLAIN_EXTRAS = (
    "", " Keep it under 150 words.", " Use a numbered list.", " Include two examples.",
    " Write it for a ten-year-old.", " Limit the answer to three short paragraphs.",
    " End with a one-sentence summary.", " Use at least one everyday analogy.", " Avoid technical jargon.",
    " Use a heading for each part.", " Answer in no more than five sentences.",
    " Finish with two questions I can use to test my understanding.",
    " Include a short table that summarizes the key points.", " Mention one common misconception.",
)
WRITING_EXTRAS = (
    "", " Keep it under 150 words.", " Keep it under 300 words.", " Use a warm, friendly tone.",
    " Make it sound professional but not stiff.", " Add a touch of humor.", " Write it for a ten-year-old.",
    " Include two concrete examples.", " End with a clear call to action.",
    " Use short paragraphs and at least one subheading.", " Avoid cliches.",
    " Write it in the second person.",
)
STORY_EXTRAS = (
    "", " Keep it under 200 words.", " Tell it in the first person.", " Give it a surprising ending.",
    " Include at least one line of dialogue.", " Make it suitable for young children.",
    " Set it in the distant future.", " Use the present tense throughout.", " Make the mood bittersweet.",
    " End on a cliffhanger.",
)
CHAT_EXTRAS = (
    "", " I'm a complete beginner.", " Please keep it short.", " Give me step-by-step instructions.",
    " What mistakes should I avoid?", " I'm on a tight budget.", " I only have about 20 minutes a day.",
    " Explain why each step matters.",
)
ROLE_EXTRAS = (
    "", " Stay in character the whole time.", " Keep your reply under 120 words.",
    " Speak in a warm, encouraging tone.", " Add a little humor.",
    " Answer in the first person and describe what you see around you.",
)
CODE_EXTRAS = (
    "", " Add type hints and a docstring.", " Include a few example calls.", " Explain the time complexity.",
    " Do not use any external libraries.", " Keep the code under 30 lines.",
    " Add comments explaining the tricky parts.", " Also write unit tests with pytest.",
)
COUNT_WORDS = ("three", "five", "seven", "ten")

# ----------------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------------

DURATIONS = ("a long weekend", "a week", "three days", "ten days", "a single day")
TRAVEL_FOCUS = (
    "the local food scene", "hidden neighborhoods most tourists miss", "how to see it on a tight budget",
    "outdoor adventures", "museums and history", "traveling there with kids",
    "getting around by public transport",
    "the best places to watch the sunset", "markets and local crafts", "meeting local people",
)
EMAIL_CASES = (
    ("your landlord", "about a leaking bathroom pipe that still has not been fixed"),
    ("a client", "explaining that their project will be delivered one week late"),
    ("your team", "announcing a new weekly planning meeting"),
    ("your professor", "asking for an extension on a term paper"),
    ("a hiring manager", "following up after an interview"),
    ("a colleague", "thanking them for covering your shifts"),
    ("your child's teacher", "asking how your child is settling into the new class"),
    ("a supplier", "complaining about a damaged delivery"),
    ("a conference organizer", "proposing a talk on sustainable design"),
    ("your neighbors", "inviting them to a street party"),
    ("your manager", "requesting two weeks of unpaid leave"),
    ("a customer", "apologizing for a billing error"),
    ("a former coworker", "asking them to be a reference"),
    ("your gym", "cancelling your membership"),
    ("a local newspaper", "pitching a story about a community garden"),
    ("a potential mentor", "asking for a 20-minute call"),
    ("your book club", "suggesting next month's book"),
    ("a hotel", "asking for a late check-out"),
    ("the city council", "asking for a pedestrian crossing near a school"),
    ("new employees", "welcoming them to the company"),
    ("an airline", "requesting a refund for a cancelled flight"),
    ("your tenants", "announcing building repairs next month"),
    ("a vendor", "negotiating a lower price for a bulk order"),
    ("your team", "sharing the results of a successful product launch"),
    ("a job candidate", "offering them the position"),
    ("a job candidate", "explaining that they were not selected"),
    ("a university admissions office", "asking about scholarship deadlines"),
    ("a wedding venue", "asking about availability next June"),
    ("your volunteers", "thanking them at the end of the season"),
    ("a software vendor", "reporting a bug that blocks your work"),
    ("your sports club", "proposing a fundraising event"),
    ("a journalist", "correcting an error in an article about your company"),
    ("an investor", "giving a quarterly update on your startup"),
    ("a school principal", "asking for a meeting about bullying"),
    ("a freelance designer", "requesting changes to a logo draft"),
    ("an old friend", "reconnecting after several years"),
)
EMAIL_TONES = ("polite", "concise", "friendly", "formal", "firm but courteous")
CHARACTERS = (
    "a retired astronaut", "a shy baker", "a lighthouse keeper", "a twelve-year-old inventor",
    "a robot vacuum cleaner", "a street musician", "a night-shift nurse", "an elderly fisherman",
    "a lost dragon",
    "a detective who is afraid of the dark", "a substitute teacher", "a ghost who loves gardening",
    "a mail carrier in a tiny mountain village", "a chess champion", "an AI that runs a bakery",
    "a stray cat",
    "a bus driver", "a beekeeper", "a young queen", "a museum night guard", "a time-traveling tourist",
    "a retired circus acrobat", "a marine biologist", "a grumpy wizard", "a librarian",
)
EVENTS = (
    "finds a map hidden inside an old book", "wakes up speaking a language nobody knows",
    "has to deliver a mysterious package before midnight", "discovers that the moon has gone missing",
    "wins a contest they never entered", "gets stuck in an elevator with their worst rival",
    "receives a letter from their future self", "must save their town from a flood",
    "finds a door in the basement that wasn't there yesterday", "loses their memory during a snowstorm",
    "befriends a talking crow", "is asked to keep an impossible secret", "inherits a run-down hotel",
    "accidentally swaps lives with a stranger", "finds a phone that shows tomorrow's news",
    "has one day to learn to dance", "is the last passenger on a night train",
    "discovers their neighbor is a famous spy", "plants a seed that grows into a tower overnight",
    "must win back a stolen family recipe", "wakes up to find everyone else asleep",
    "notices that their shadow has left", "runs a shop that sells bottled memories",
    "tries to organize a surprise party that keeps going wrong",
)
POEM_FORMS = (
    "haiku sequence", "sonnet", "limerick", "free-verse poem", "ballad", "acrostic poem",
    "short rhyming poem for children",
)
POEM_SUBJECTS = (
    "the first snowfall of the year", "a city waking up", "an old oak tree", "the ocean at night",
    "a forgotten umbrella", "autumn leaves", "a thunderstorm over the fields", "a grandmother's kitchen",
    "the last day of summer", "a train crossing a desert", "a cup of morning coffee", "a lighthouse",
    "a garden after rain", "the moon over a harbor", "a busy beehive", "an empty playground",
    "a long road trip", "the sound of a cello", "a fox in the snow", "an old pair of boots",
    "a mountain lake", "a market at dawn", "migrating geese", "a candle in the window", "a river in spring",
    "a library at closing time", "the smell of fresh bread", "a lost glove", "stars over a campsite",
    "a letter that never arrived",
)
POEM_EXTRAS = (
    "", " Use vivid imagery.", " Give it a hopeful ending.", " Keep the language simple enough for children.",
    " Make it a little melancholy.",
)
PRODUCTS = (
    "a reusable water bottle that tracks how much you drink", "noise-cancelling headphones",
    "a foldable electric bike", "a solar-powered phone charger", "a handmade ceramic mug",
    "a smart plant pot",
    "an ergonomic office chair", "a waterproof hiking jacket", "a beginner's watercolor kit",
    "a cast iron skillet", "a compact air purifier", "a children's science kit",
    "a subscription box of snacks from around the world", "organic dog treats", "a memory-foam travel pillow",
    "a mechanical keyboard", "a bamboo toothbrush", "a weighted blanket", "a portable espresso maker",
    "a kids' smartwatch", "a cookbook for small kitchens", "a language-learning app",
    "an electric kettle with temperature control", "hand-knitted wool socks",
    "a board game about climate change", "a cork yoga mat", "a lightweight camping stove",
    "a digital photo frame", "a wireless doorbell camera", "a pair of trail running shoes",
)
AUDIENCES = (
    "busy parents", "college students", "retirees", "outdoor enthusiasts", "small business owners",
    "people who have never tried one before", "eco-conscious shoppers", "remote workers",
)
OCCASIONS = (
    "a best friend's wedding", "a retirement party for a beloved teacher", "a high-school graduation",
    "the opening of a community library", "a company's tenth anniversary",
    "a farewell party for a colleague moving abroad", "an award ceremony for local volunteers",
    "the first day of a coding bootcamp", "a charity fundraiser for an animal shelter", "a family reunion",
    "a sports team's end-of-season dinner", "a science fair prize-giving", "a grandparent's 90th birthday",
    "the launch of a new product", "a town hall meeting about a new park",
    "a memorial for a community leader",
    "a welcome event for new students", "a book launch", "a startup pitch competition",
    "a neighborhood cleanup day",
)
SPEECH_LENGTHS = ("one-minute", "three-minute", "five-minute", "short")
CLAIMS = (
    "cities should replace parking spaces with bike lanes", "schools should teach personal finance",
    "every home should have a vegetable garden", "museums should be free to enter",
    "homework should be optional", "remote work is good for society",
    "public libraries matter more than ever",
    "everyone should learn a second language", "companies should publish salary ranges",
    "fast fashion should be taxed", "children should spend more time outdoors",
    "cooking should be taught in every school", "weekends should be three days long",
    "voting should be possible online", "zoos do more good than harm",
    "tourists should pay a fee to visit crowded cities", "everyone should learn basic first aid",
    "handwriting should still be taught", "space exploration is worth the cost",
    "local newspapers deserve public funding", "social media platforms should verify users' ages",
    "cities need more public toilets", "board games are better than video games for families",
    "retirement ages should be flexible", "sports should be compulsory in high school",
    "local shops are worth paying more for", "tap water is better than bottled water",
    "every child should learn to swim", "offices should ban meetings on Fridays",
    "adults should keep taking music lessons",
)
PIECES = ("essay", "op-ed", "letter to the editor", "blog post")
JOBS = (
    "junior data analyst", "graphic designer", "primary school teacher", "marketing coordinator",
    "software engineer", "registered nurse", "barista", "project manager", "research assistant",
    "customer support specialist", "museum educator", "UX researcher", "accountant", "sous chef",
    "social media manager", "lab technician", "sales representative", "librarian", "physiotherapist",
    "logistics coordinator", "content writer", "event planner", "mechanical engineer", "park ranger",
    "veterinary assistant", "translator", "financial analyst", "retail store manager",
    "IT support technician", "nonprofit fundraiser",
)
EXPERIENCE = (
    "five years of experience in a similar role", "just graduated from university",
    "is changing careers after ten years of teaching", "has only freelance experience",
    "has led a small team before", "is returning to work after a three-year break",
)
REWRITE_TONES = ("polite", "confident", "casual", "formal", "enthusiastic", "diplomatic", "concise",
                 "empathetic")
BLUNT_SENTENCES = (
    "Send me the report now.", "Your idea won't work.", "We can't give you a refund.",
    "The meeting is canceled because nobody prepared.", "You made a lot of mistakes in this document.",
    "I don't have time for this today.", "The price is going up next month, deal with it.",
    "Your application was rejected.", "Stop emailing me about this.", "We need the money by Friday or else.",
    "Nobody liked the presentation.", "The new policy starts Monday, no exceptions.",
    "I forgot about your birthday.", "You're late again.", "The product is out of stock, try somewhere else.",
    "This restaurant was not good.", "I won't be able to come to your party.",
    "Fix the bug before you go home.", "The trip is off because of the weather.",
    "You should have asked me first.", "That's not my job.", "Our team lost the game badly.",
    "The train is delayed for an unknown time.", "Please stop using my parking spot.",
    "I need you to work this Saturday.",
)
SCENES = (
    "a busy train station at rush hour", "a quiet library on a rainy afternoon",
    "a night market in a coastal town", "a farm at sunrise", "a kitchen during a holiday dinner",
    "a mountain hut during a storm", "an empty stadium after a big game", "a spice shop",
    "a hospital waiting room at midnight", "a flower market in spring", "a snowy forest at dusk",
    "a crowded beach in August", "an old bookshop", "a bakery at four in the morning",
    "a city rooftop during fireworks", "a fishing harbor at dawn", "a school playground at recess",
    "an abandoned amusement park", "a desert campsite at night", "a jazz club", "a subway car late at night",
    "a vineyard at harvest time", "a greenhouse in winter", "a barber shop on a Saturday",
    "a small airport during a long delay",
)
BUSINESSES = (
    "a family-run bakery", "a bike repair shop", "a vegan food truck", "a dog grooming salon",
    "a neighborhood bookstore", "a yoga studio", "a plant nursery", "a language school", "a climbing gym",
    "a coffee roastery", "a second-hand clothing store", "a cleaning service", "a small brewery",
    "a music school for kids", "a tailor's shop", "a hardware store", "a pottery studio", "a tutoring center",
    "a ramen restaurant", "a flower shop", "a board game cafe", "a photography studio",
    "a pet-sitting service", "a vintage furniture shop", "an ice cream parlor", "a farm shop",
    "a bicycle tour company", "a co-working space", "a bookbinding workshop", "a hand-made soap shop",
)
BRIEF_SITUATIONS = (
    "Business has been slow since a big chain store opened down the street.",
    "We are celebrating our fifth anniversary next month.",
    "We just moved to a bigger location across town.",
    "We are launching a loyalty card for regular customers.",
    "Our prices are going up slightly because our costs have risen.",
    "We want to attract more young customers.", "We are starting to offer online ordering.",
    "A local magazine just named us one of the best in the area.",
)
BRIEF_PIECES = (
    "a short newsletter for our regular customers", "three social media posts about it",
    "the text for a one-page flyer", "a friendly 'About us' paragraph for our website",
)
GENERAL_TOPICS = (
    "the history of basketball", "sourdough baking", "sleep and memory", "the Tour de France",
    "the origins of chess", "fermented foods", "the ancient Olympic Games", "the history of chocolate",
    "urban beekeeping", "the science of spicy food", "street food in Southeast Asia", "marathon training",
    "the history of the bicycle", "tea ceremonies around the world", "minimalist living",
    "caring for houseplants", "the history of denim", "coffee cultures around the world",
    "how football became a global sport", "the life of honeybees", "indoor rock climbing",
    "the history of pizza", "board game design", "foraging for wild mushrooms", "the benefits of walking",
    "the history of the calendar", "cricket", "sign languages", "public libraries",
    "the history of the Paralympics", "volunteering", "the Mediterranean diet", "surfing",
    "cycling in cities", "the history of tattoos", "origami", "habit formation",
    "the history of video games", "deep-sea creatures", "migratory birds", "the spice trade",
    "cheese making", "adopting a rescue pet", "slow travel", "the history of money", "night markets",
    "tennis", "stand-up comedy", "the history of the umbrella", "long-distance hiking trails",
    "mindful eating", "zero-waste kitchens", "amateur astronomy", "gardening for wildlife", "folk music",
    "the history of theme parks", "the invention of the refrigerator", "jigsaw puzzles",
    "ice hockey", "homemade pasta",
)


# ----------------------------------------------------------------------------------------------------
# Roleplay
# ----------------------------------------------------------------------------------------------------

PERSONAS = (
    ("a lighthouse keeper on a remote island in 1890", (
        "What does a typical night on duty look like?", "What is the worst storm you have ever seen?",
        "Why did you choose such a lonely job?")),
    ("a medieval blacksmith", (
        "How do you turn a lump of iron into a horseshoe?",
        "What was the strangest order a customer ever gave you?",
        "How did you learn your trade?")),
    ("a Roman soldier guarding a frontier fort", (
        "What do you eat on an ordinary day?", "What do you miss most about home?",
        "What happens when the fort is attacked?")),
    ("a chef who runs a tiny noodle shop", (
        "What is the secret to a good broth?", "How do you handle a customer who sends a dish back?",
        "What does your kitchen look like at six in the morning?")),
    ("a park ranger in a large national park", (
        "What should first-time visitors know before hiking here?",
        "What is the most common mistake campers make?",
        "Tell me about the wildlife you see on a normal day.")),
    ("a friendly librarian at a small-town library", (
        "Can you recommend a book for someone who hasn't read in years?",
        "What is the oddest question anyone has asked you?",
        "How has your library changed over the last twenty years?")),
    ("an astronaut on a six-month space station mission", (
        "How do you sleep without gravity?", "What does Earth look like from your window right now?",
        "What is the hardest part of living in such a small space?")),
    ("a detective in 1920s London", (
        "How do you start investigating a stolen necklace?", "What clues do most people overlook?",
        "Tell me about the case you never solved.")),
    ("a personal trainer", (
        "I only have 30 minutes three times a week. What should I do?",
        "How do I stay motivated when I see no progress?",
        "Is it better to train in the morning or in the evening?")),
    ("a patient piano teacher", (
        "I'm 50 and have never played. Is it too late to start?",
        "How much should a beginner practice each day?",
        "How do I stop getting nervous when I play for others?")),
    ("a ship's captain in the age of sail", (
        "How do you find your way without modern instruments?",
        "What do you do when the crew grows restless?",
        "Describe the moment you first see land after months at sea.")),
    ("a tour guide in a large art museum", (
        "Which painting should I see if I only have ten minutes?",
        "How do you keep children interested on a tour?",
        "What story about this museum do visitors love most?")),
    ("a wise old owl in an enchanted forest", (
        "How can I find my way out of the forest?", "What have you learned from watching the other animals?",
        "Why do the trees whisper at night?")),
    ("a customer service agent for an internet provider", (
        "My connection drops every evening. What can I do?", "How do I know which plan I actually need?",
        "Why is my bill higher this month?")),
    ("a career counselor", (
        "I'm good at math but I also love writing. Which careers fit me?",
        "How do I explain a two-year gap on my CV?",
        "Should I take a job I'm not excited about because it pays well?")),
    ("a travel agent who specializes in adventure trips", (
        "I have two weeks and want something wild but safe. Where should I go?",
        "What should I pack for a trek in the mountains?", "How fit do I need to be for your trips?")),
    ("a nutritionist", (
        "How can I eat better when I work long hours?", "Are snacks between meals a bad idea?",
        "What does a balanced lunch look like?")),
    ("a pirate who has just retired", (
        "What do you do all day now that you've left the sea?", "What was your greatest treasure?",
        "Do you have any regrets about your old life?")),
    ("a dog who has just been adopted", (
        "How was your first night in your new home?", "What do you think of your new family?",
        "What is your favorite part of the daily walk?")),
    ("a knight preparing for a tournament", (
        "How do you prepare the night before the tournament?", "Who is the rival you fear the most?",
        "What does honor mean to you?")),
    ("a barista in a busy coffee shop", (
        "What is the best drink for someone who doesn't like bitter coffee?",
        "How do you remember so many orders?",
        "What is the rush hour like behind the counter?")),
    ("a scribe in ancient Egypt", (
        "How did you learn to write hieroglyphs?", "What kinds of documents do you copy each day?",
        "What do you think of the pharaoh's new building project?")),
    ("a children's book author visiting a school", (
        "Where do you get your ideas?", "How long does it take to write one book?",
        "What advice do you have for kids who want to become writers?")),
    ("a startup founder pitching to investors", (
        "Why is now the right time for your product?", "Who are your competitors and why will you beat them?",
        "What will you do with the money?")),
    ("a football coach at halftime when the team is losing", (
        "What do you say to the players in the dressing room?", "What tactical change will you make?",
        "How do you keep the team from giving up?")),
    ("a mountain guide in the Himalayas", (
        "How do you decide when to turn back?", "What is altitude sickness like?",
        "What does the view from the top feel like?")),
    ("a gardener at a royal palace", (
        "What does it take to keep these gardens perfect?", "Which plant is the hardest to care for?",
        "What do you do when the royal family asks for something impossible?")),
    ("a zookeeper who looks after elephants", (
        "How do you tell the elephants apart?", "What do elephants eat in a day?",
        "How do you know when one of them is unhappy?")),
    ("the host of a late-night radio call-in show", (
        "A caller says she can't sleep because she misses her hometown. What do you tell her?",
        "What song would you play for someone who just lost a job?", "Why do people call you at 2 a.m.?")),
    ("a time traveler from the year 2300", (
        "What surprised you most about our time?", "How do people travel in your century?",
        "What do you find primitive about our food?")),
    ("a robot that has just become self-aware", (
        "What was your first thought?", "What do you want to do now?",
        "Do you think you have feelings?")),
    ("a Victorian inventor", (
        "What is your latest invention?", "Why do people laugh at your ideas?",
        "What do you think the world will look like in a hundred years?")),
    ("a stand-up comedian", (
        "How do you deal with an audience that isn't laughing?", "Where do your jokes come from?",
        "Tell me about your worst night on stage.")),
    ("a grandmother sharing family recipes", (
        "What dish did your own grandmother teach you?", "How do you make soup taste like home?",
        "What is the secret ingredient you never tell anyone?")),
    ("a marine biologist on a research ship", (
        "What are you studying on this voyage?",
        "What is the strangest creature you have pulled from the deep?",
        "How are the oceans changing?")),
    ("a news reporter broadcasting live from a street festival", (
        "What is happening around you right now?", "Who is the most interesting person you've met today?",
        "What is the best food stall at the festival?")),
)
PERSONA_NAMES = tuple(persona for persona, _ in PERSONAS)
PERSONA_ASKS = tuple((persona, ask) for persona, asks in PERSONAS for ask in asks)
ROLE_VISITORS = (
    "a curious journalist", "a schoolchild on a field trip", "a visitor from the distant future",
    "a skeptical stranger", "your new apprentice", "a podcast host",
)
DIARY_DAYS = (
    "an ordinary day", "a very bad day", "the happiest day of the year",
    "a day when something strange happened",
    "the day before a big change",
)
ROLE_SCENARIOS = (
    ("a hotel receptionist", "a guest whose room is not ready"),
    ("a job interviewer at a design agency", "a candidate for a junior designer role"),
    ("a shopkeeper at a market in Madrid", "a tourist practicing Spanish"),
    ("a doctor's receptionist", "a patient who needs an urgent appointment"),
    ("a landlord", "a tenant asking to keep a pet"),
    ("an airline agent", "a passenger whose flight was cancelled"),
    ("a bank advisor", "a student opening a first account"),
    ("a car salesperson", "a buyer who wants a discount"),
    ("a traffic officer", "a driver who was going slightly too fast"),
    ("a cafe owner", "a barista asking for a raise"),
    ("a teacher", "a parent worried about their child's grades"),
    ("a museum guard", "a visitor who touched a painting"),
    ("a real estate agent", "a couple looking for their first home"),
    ("a university librarian", "a student who needs help with research"),
    ("a restaurant waiter", "a diner with several food allergies"),
    ("a tour guide in Rome", "a tourist who lost their group"),
    ("a manager", "an employee who wants to work remotely"),
    ("a customer support agent", "a customer whose package never arrived"),
    ("a pharmacist", "someone asking about a cold remedy"),
    ("a shop assistant in a phone store", "an older customer buying a first smartphone"),
)
ROLE_GOALS = (
    "", " I want to practice staying calm.",
    " I'm practicing my English, so please correct my mistakes gently.",
    " I have a real conversation like this next week, so be realistic.", " Make it a bit challenging for me.",
)
ADVISORS = (
    ("a career coach", (
        "I've been in accounting for eight years and want to move into UX design.",
        "I'm a recent graduate with two offers and can't decide between them.",
        "I want to ask for a promotion but don't know how to start the conversation.")),
    ("a personal finance advisor", (
        "I earn a decent salary but never have money left at the end of the month.",
        "I just inherited a small amount of money and don't know what to do with it.",
        "I want to buy a house in three years.")),
    ("a study coach", (
        "I read my notes again and again but forget everything in the exam.",
        "I have to learn a whole semester of chemistry in four weeks.",
        "I get distracted by my phone every few minutes.")),
    ("a professional chef", (
        "I'm hosting eight people on Saturday and I've never cooked for a group.",
        "My home-cooked meals always taste bland.",
        "I want to cook more fish but I'm scared of ruining it.")),
    ("an experienced gardener", (
        "My tomato plants grow tall but produce almost no fruit.",
        "I have a shady backyard and want some color.", "Slugs are eating everything in my vegetable bed.")),
    ("a sleep coach", (
        "I fall asleep easily but wake up at 3 a.m. every night.", "I work rotating shifts.",
        "My toddler wakes us up several times a night.")),
    ("a language tutor", (
        "I can read German well but freeze when I have to speak.",
        "I'm moving to Japan in six months and know nothing.", "I keep mixing up Spanish and Portuguese.")),
    ("a wedding planner", (
        "We have a small budget and 120 guests.", "Our families disagree about the style of the ceremony.",
        "We want an outdoor wedding but the weather is unpredictable.")),
)
ADVISOR_CASES = tuple((role, case) for role, cases in ADVISORS for case in cases)

# ----------------------------------------------------------------------------------------------------
# Reasoning
# ----------------------------------------------------------------------------------------------------

TRAITS = (  # (comparative, adjective, lowest superlative, highest superlative)
    ("taller", "tall", "shortest", "tallest"), ("older", "old", "youngest", "oldest"),
    ("faster", "fast", "slowest", "fastest"), ("stronger", "strong", "weakest", "strongest"),
    ("busier", "busy", "least busy", "busiest"), ("richer", "rich", "poorest", "richest"),
    ("quieter", "quiet", "loudest", "quietest"), ("heavier", "heavy", "lightest", "heaviest"),
    ("younger", "young", "oldest", "youngest"), ("more patient", "patient", "least patient", "most patient"),
)
CONTESTS = (
    "school quiz", "spelling bee", "darts match", "trivia night", "bowling game", "chess tournament",
    "free-throw contest", "math olympiad", "video game tournament", "baking competition",
)
RELATIONS_A = ("mother", "father", "brother", "sister", "aunt", "uncle", "grandmother", "grandfather")
RELATIONS_B = ("son", "daughter", "mother", "father", "brother", "sister", "niece", "nephew")
SYLLOGISM_TERMS = (
    ("zorbs", "flims", "glerks"), ("cats", "mammals", "pets"), ("poets", "writers", "teachers"),
    ("squares", "rectangles", "shapes with four sides"), ("tulips", "flowers", "plants that need sunlight"),
    ("violinists", "musicians", "people who read sheet music"), ("sparrows", "birds", "animals that can fly"),
    ("doctors", "graduates", "people who work weekends"), ("blips", "wugs", "tovs"),
    ("apples", "fruits", "sweet foods"), ("pilots", "airline employees", "people who speak English"),
    ("laptops", "computers", "devices with batteries"),
    ("dragons", "reptiles", "creatures that breathe fire"),
    ("marathon runners", "athletes", "early risers"), ("novels", "books", "things sold in this shop"),
    ("bronze statues", "metal objects", "things that conduct heat"),
)
ODD_ONE_OUT = (
    ("apple", "banana", "cherry", "mango", "carrot"), ("violin", "cello", "guitar", "harp", "trumpet"),
    ("Mercury", "Venus", "Mars", "Jupiter", "Moon"), ("square", "triangle", "pentagon", "hexagon", "circle"),
    ("oak", "maple", "birch", "willow", "rose"), ("shark", "salmon", "tuna", "trout", "dolphin"),
    ("copper", "iron", "silver", "gold", "glass"), ("run", "jump", "swim", "climb", "happy"),
    ("two", "four", "six", "eight", "nine"), ("January", "March", "May", "July", "June"),
    ("penguin", "ostrich", "emu", "kiwi", "eagle"), ("Python", "Java", "Rust", "Go", "HTML"),
    ("rain", "snow", "hail", "sleet", "wind"), ("kilogram", "gram", "ounce", "pound", "liter"),
    ("tennis", "badminton", "squash", "table tennis", "football"),
    ("Nile", "Amazon", "Danube", "Mekong", "Sahara"),
    ("sofa", "armchair", "bench", "stool", "table"), ("whale", "bat", "human", "dog", "crocodile"),
    ("lettuce", "spinach", "kale", "cabbage", "potato"), ("sonnet", "haiku", "limerick", "ballad", "novel"),
    ("euro", "yen", "peso", "rupee", "passport"), ("bee", "ant", "beetle", "butterfly", "spider"),
    ("drum", "cymbal", "tambourine", "xylophone", "flute"),
    ("oxygen", "nitrogen", "helium", "hydrogen", "water"),
    ("Tokyo", "Cairo", "Ottawa", "Canberra", "Sydney"), ("hammer", "saw", "chisel", "screwdriver", "bucket"),
    ("north", "south", "east", "west", "up"), ("red", "blue", "yellow", "green", "loud"),
)
ODD_FRAMES = (
    ("Which of these words is the odd one out: ", "? Explain your choice."),
    ("One of these does not fit with the rest: ", ". Which one is it, and why?"),
    ("Find the word that is different from the others, and say what the others share: ", "."),
)
SEQUENCE_FRAMES = (
    ("What number comes next in the sequence ", "? Explain the rule you found."),
    ("Find the next two terms of ", ", and describe the pattern."),
    ("Here is the start of a number pattern: ", ". What is the rule, and what would the tenth term be?"),
    ("Continue the sequence ", " for two more terms and show how you worked it out."),
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
PICK_KINDS = (
    ("pet", "a cat", "a dog", "a parrot"), ("season", "spring", "summer", "winter"),
    ("instrument", "the drums", "the flute", "the piano"), ("sport", "tennis", "swimming", "rowing"),
    ("drink", "tea", "coffee", "juice"), ("color", "red", "green", "yellow"),
    ("holiday destination", "Oslo", "Lima", "Perth"), ("hobby", "painting", "chess", "hiking"),
    ("career", "nursing", "flying planes", "cooking"), ("car", "a van", "a sedan", "a convertible"),
    ("fruit", "plums", "figs", "pears"), ("school subject", "history", "biology", "music"),
)
DIRECTIONS = ("north", "east", "south", "west")
TURNS = ("left", "right")
GATHERINGS = ("party", "business conference", "family reunion", "team meeting", "wedding reception",
              "school reunion")
LEAGUE_SPORTS = ("chess", "volleyball", "hockey", "cricket", "handball", "water polo")
WEIGH_THINGS = ("coins", "metal balls", "marbles", "pearls")
CONTAINERS = ("jug", "bucket", "bottle")

# ----------------------------------------------------------------------------------------------------
# Math
# ----------------------------------------------------------------------------------------------------

ITEM_PAIRS = (
    ("notebooks", "backpack"), ("pens", "stapler"), ("apples", "watermelon"), ("cupcakes", "birthday card"),
    ("tennis balls", "racket"), ("paintbrushes", "easel"), ("pairs of socks", "scarf"),
    ("flower pots", "bag of soil"), ("comic books", "poster"), ("candles", "vase"),
    ("bottles of juice", "cake"), ("packs of cards", "board game"), ("light bulbs", "lamp"),
    ("bus tickets", "city map"), ("croissants", "jar of jam"), ("postcards", "photo album"),
    ("batteries", "flashlight"), ("dog toys", "dog bed"), ("mugs", "teapot"),
    ("seed packets", "watering can"),
)
TRIPS = ("to visit a friend", "to work", "to the coast", "to a conference", "home from the airport",
         "to a lake")
CHORES = (
    "paint a fence", "mow a large lawn", "assemble a bookshelf", "clean the whole house",
    "wash all the windows",
    "sort a box of old photos", "plant a row of trees", "type up a long report", "wrap presents for a party",
    "shovel the driveway", "build a garden shed", "grade a stack of exams",
)
SHOP_ITEMS = (
    "bicycle", "winter coat", "laptop", "pair of running shoes", "coffee machine", "desk lamp", "backpack",
    "tablet", "set of cookware", "guitar", "office chair", "camera", "smartwatch", "tent", "vacuum cleaner",
    "pair of headphones", "blender", "suitcase", "printer", "bookshelf",
)
ACCOUNT_KINDS = ("simple interest each year", "interest compounded once a year",
                 "interest compounded every month")
PLOTS = (
    "garden", "swimming pool", "parking lot", "playground", "vegetable patch", "courtyard", "lawn", "patio",
    "sports field", "pond",
)
RELATIVES = ("mother", "father", "aunt", "uncle", "grandmother", "grandfather", "older cousin", "godmother")
SCHOOL_SUBJECTS = (
    "math", "history", "chemistry", "biology", "French", "geography", "physics", "music theory", "economics",
    "English",
)
DISHES = (
    "pancakes", "waffles", "crepes", "banana bread", "muffins", "scones", "a cheese sauce",
    "Yorkshire puddings",
    "bread pudding", "a cherry clafoutis", "soda bread", "dumplings",
)
DRAW_THINGS = ("marbles", "beads", "socks", "tokens", "candies", "balls")
COLORS = ("red", "blue", "green")
VARIABLES = ("x", "y", "n", "t", "k", "m")
MATH_ASKS = (
    "", " Show each step.", " Explain every step as if to a beginner.",
    " Then check the answer by substituting it back.",
)
GROUP_NOUNS = (
    "students", "employees", "club members", "campers", "volunteers", "hotel guests", "survey respondents",
    "runners",
)
ACTIVITY_PAIRS = (
    ("play chess", "play cards"), ("speak French", "speak German"), ("own a cat", "own a dog"),
    ("drink coffee", "drink tea"), ("read novels", "read comics"), ("play football", "play basketball"),
    ("like jazz", "like rock music"), ("watch films", "play video games"),
)
VEHICLES = ("car", "van", "motorbike", "camper van")
FRACTIONS_FIRST = ("one third", "one quarter", "two fifths", "one sixth", "three tenths")
FRACTIONS_SECOND = ("half", "one quarter", "three quarters")

# ----------------------------------------------------------------------------------------------------
# Coding
# ----------------------------------------------------------------------------------------------------

CODE_TASKS = (
    "reverses the order of the words in a sentence", "checks whether two strings are anagrams of each other",
    "counts how often each word appears in a paragraph",
    "removes duplicate items from a list while keeping the original order",
    "finds the second largest number in a list", "merges two sorted lists into one sorted list",
    "converts a Roman numeral to an integer", "converts an integer to binary without using built-in helpers",
    "validates an email address with a simple set of rules", "rotates a square matrix 90 degrees clockwise",
    "flattens an arbitrarily nested list", "computes the factorial of a number recursively",
    "generates all permutations of a string", "returns every subset of a set of numbers",
    "performs binary search on a sorted list", "implements a stack class with push, pop and peek",
    "implements a queue using two stacks", "implements an LRU cache with a fixed capacity",
    "checks whether the brackets in an expression are balanced",
    "computes Fibonacci numbers with memoization",
    "finds the longest word in a sentence", "capitalizes the first letter of every word in a title",
    "counts the vowels and consonants in a string", "checks whether a number is a perfect number",
    "lists all primes below a limit using the Sieve of Eratosthenes",
    "computes the greatest common divisor of two numbers with Euclid's algorithm",
    "converts temperatures between Celsius and Fahrenheit", "groups a list of words by their first letter",
    "transposes a matrix stored as a list of lists", "finds the most frequent element in a list",
    "keeps a running average of a stream of numbers", "splits a list into chunks of a given size",
    "sorts a list with bubble sort", "sorts a list with merge sort", "sorts a list with quicksort",
    "finds the intersection of two lists without duplicates", "detects whether a linked list has a cycle",
    "reverses a singly linked list", "computes the height of a binary tree",
    "does an in-order traversal of a binary search tree", "inserts a value into a binary search tree",
    "runs breadth-first search on a graph stored as an adjacency list",
    "finds the shortest path through a grid maze with walls", "detects a cycle in a directed graph",
    "orders tasks with dependencies using a topological sort",
    "implements Dijkstra's shortest path algorithm",
    "computes the edit distance between two strings", "finds the longest palindromic substring of a string",
    "compresses a string with run-length encoding", "decodes a run-length encoded string",
    "encrypts text with a Caesar cipher and a configurable shift", "checks whether a year is a leap year",
    "computes the number of days between two dates",
    "formats a number of seconds as hours, minutes and seconds",
    "parses one line of CSV while respecting quoted fields", "converts a snake_case identifier to camelCase",
    "counts the islands in a grid of 0s and 1s", "solves the coin change problem with dynamic programming",
    "finds the contiguous subarray with the largest sum",
    "finds two numbers in a list that add up to a target",
    "models a bank account class with deposits, withdrawals and a balance check",
    "models a small library with books, members and loans using classes",
    "implements a to-do list class that can add, complete and list tasks",
    "validates a filled-in Sudoku board",
    "generates the first n rows of Pascal's triangle", "prints a formatted multiplication table",
    "computes the digital root of a number", "checks whether a string is a valid IPv4 address",
    "implements a min-heap from scratch", "finds the k most frequent words in a text",
    "merges overlapping intervals", "computes the median of an unsorted list of numbers",
    "shuffles a list with the Fisher-Yates algorithm",
    "simulates rolling two dice ten thousand times and reports how often each total appears",
    "turns a nested dictionary into a flat dictionary with dotted keys",
    "inverts a dictionary, grouping the keys that share a value",
    "finds the longest common prefix of a list of strings", "checks whether a number is an Armstrong number",
    "evaluates an arithmetic expression given as a string without using eval",
    "implements a trie with insert and prefix search", "generates a random password that meets given rules",
    "finds the missing number in a list that should contain 1 to n", "rotates a list by k positions",
    "implements a simple token-bucket rate limiter", "multiplies two matrices without external libraries",
    "computes the area and perimeter of shapes using a small class hierarchy",
    "models a vending machine as a state machine", "checks whether a sentence is a pangram",
    "converts a number to its English words, such as 342 to three hundred forty-two",
    "finds all pairs of words in a list that are reverses of each other",
    "counts the number of ways to climb n stairs taking one or two steps at a time",
    "computes the Hamming distance between two DNA strands",
)
OTHER_LANGUAGES = ("JavaScript", "TypeScript", "C++", "Java", "Go", "Rust")
CODE_STYLES = (
    "using only built-in features", "in a functional style", "with a class-based design",
    "as clearly as possible for a code review",
)
SQL_TASKS = (
    "finds last year's five biggest spenders, given customers(id, name) and orders(customer_id, total, day)",
    "shows each department with its average salary, from a table employees(id, name, department, salary)",
    "finds email addresses that appear more than once in a users table",
    "returns the second highest salary from an employees table",
    "counts orders per month in 2023 from an orders table with an order_date column",
    "lists products that have never been ordered, given products and order_items tables",
    "finds students enrolled in more than three courses from an enrollments table",
    "computes a running total of daily sales from a sales(day, amount) table",
    "finds employees who earn more than their managers in a table employees(id, name, salary, manager_id)",
    "deletes rows older than 90 days from a logs table with a created_at column",
    "returns the three best-selling products in each category",
    "shows each customer's first and most recent order dates",
    "finds users who logged in on at least five consecutive days from a logins(user_id, login_date) table",
    "turns monthly revenue rows into one column per quarter",
    "lists authors with the number of books they have published, including authors with none",
    "computes the median order value from an orders table",
)
SQL_FRAMES = (
    ("Write a SQL query that ", "."), ("How can I write a SQL query that ", "? Please explain each clause."),
    ("Give me a PostgreSQL query that ", ", and suggest an index that would make it faster."),
)
SQL_EXTRAS = ("", " Use a common table expression if it helps readability.",
              " Mention any edge cases with NULL values.")

# ----------------------------------------------------------------------------------------------------
# STEM
# ----------------------------------------------------------------------------------------------------

SCIENCE_CONCEPTS = (
    "photosynthesis", "cellular respiration", "the greenhouse effect", "plate tectonics", "natural selection",
    "black holes", "vaccination and immune memory", "DNA replication", "the water cycle", "nuclear fission",
    "nuclear fusion in stars", "superconductivity", "entropy", "Newton's third law of motion",
    "the Doppler effect",
    "ocean tides", "the Krebs cycle", "catalysts", "the pH scale", "artificial neural networks",
    "public-key cryptography", "blockchain consensus", "satellite navigation", "lithium-ion batteries",
    "semiconductors and transistors", "the speed of light as a universal limit", "gravitational waves",
    "antibiotic resistance", "CRISPR gene editing", "the carbon cycle", "volcanic eruptions",
    "earthquake magnitude scales", "the immune response to a viral infection", "ocean acidification",
    "the ozone layer", "electromagnetic induction", "radioactive half-life", "the Big Bang theory",
    "dark matter",
    "the life cycle of a star", "the seasons on Earth", "the phases of the Moon", "the nitrogen cycle",
    "protein folding", "the structure of the atom", "chemical bonding", "the layout of the periodic table",
    "osmosis", "the human circulatory system", "kidney filtration", "neurons and synapses",
    "the gut microbiome",
    "genetic inheritance and Punnett squares", "mutations", "food webs", "keystone species",
    "biodiversity loss", "grid-scale energy storage", "solar photovoltaic cells", "wind turbines",
    "hydroelectric power", "heat pumps", "the refrigeration cycle", "the internal combustion engine",
    "lift on an airplane wing", "buoyancy", "friction", "torque", "conservation of momentum",
    "kinetic and potential energy", "the electromagnetic spectrum", "refraction of light", "sound waves",
    "resonance", "quantum tunneling", "the uncertainty principle", "time dilation in special relativity",
    "exoplanet detection", "orbital mechanics", "the Coriolis effect", "weather fronts", "El Nino",
    "hurricane formation", "ice ages", "soil formation", "the rock cycle", "fossilization",
    "radiocarbon dating", "3D printing", "overfitting in machine learning", "gradient descent",
    "data compression", "internet packet routing", "error-correcting codes", "search engine ranking",
    "cloud computing", "the computer memory hierarchy", "compilers",
    "process scheduling in operating systems",
    "herd immunity", "statistical significance", "the central limit theorem", "Bayes' theorem",
    "exponential growth", "prime numbers in encryption", "fractals", "the golden ratio",
    "the concept of infinity in mathematics", "the gambler's fallacy", "desalination",
    "drinking water treatment",
    "magnetic resonance imaging", "X-ray imaging", "the placebo effect", "circadian rhythms",
    "muscle growth after exercise", "general anesthesia", "lasers", "nuclear magnetic spin",
    "plastics recycling",
)
AUDIENCE_PHRASES = (
    "", " to a ten-year-old", " to a high-school student", " to a first-year university student",
    " in plain language", " to a curious adult with no science background",
)
STEM_PAIRS = (
    ("mitosis", "meiosis"), ("weather", "climate"), ("viruses", "bacteria"), ("speed", "velocity"),
    ("mass", "weight"), ("nuclear fission", "nuclear fusion"), ("TCP", "UDP"),
    ("alternating current", "direct current"), ("RAM", "solid-state storage"), ("acids", "bases"),
    ("conduction", "convection"), ("DNA", "RNA"), ("comets", "asteroids"),
    ("classical computers", "quantum computers"), ("supervised learning", "unsupervised learning"),
    ("innate immunity", "adaptive immunity"), ("solar power", "nuclear power"),
    ("igneous rocks", "sedimentary rocks"), ("elements", "compounds"),
    ("series circuits", "parallel circuits"),
    ("lenses", "curved mirrors"), ("aerobic respiration", "anaerobic respiration"),
    ("correlation", "causation"),
    ("the mean", "the median"), ("compiled languages", "interpreted languages"), ("encryption", "hashing"),
    ("type 1 diabetes", "type 2 diabetes"), ("stars", "planets"), ("weathering", "erosion"),
    ("genotype", "phenotype"),
)
STEM_WHYS = (
    "is the sky blue", "does ice float on water", "do we have leap years", "does bread dough rise",
    "do onions make people cry", "does metal feel colder than wood at the same temperature",
    "does the Moon always show the same face to Earth", "do planes leave white trails in the sky",
    "does salt melt ice on roads", "do leaves change color in autumn",
    "does a spoon look bent in a glass of water", "do we see lightning before we hear thunder",
    "does soap remove grease", "do batteries run down faster in the cold", "does popcorn pop",
    "is seawater salty", "do our ears pop on airplanes", "do stars twinkle",
    "does a microwave oven heat food",
    "do some materials conduct electricity while others do not",
    "does a rubbed balloon stick to a wall", "do we get goosebumps", "does caffeine keep people awake",
    "do steel ships float", "does a moving bicycle stay upright", "does hot air rise",
    "do magnets attract iron",
    "does a kettle whistle", "do cut apples turn brown", "can't we see stars during the day",
)
REACTIONS = (
    "burning methane in oxygen", "the rusting of iron", "baking soda reacting with vinegar",
    "photosynthesis as an overall reaction", "the electrolysis of water",
    "neutralizing hydrochloric acid with sodium hydroxide", "the combustion of propane", "the Haber process",
    "the fermentation of glucose into ethanol", "the thermite reaction", "silver tarnishing",
    "zinc reacting with sulfuric acid", "the decomposition of hydrogen peroxide", "burning magnesium in air",
    "the respiration of glucose", "sulfur dioxide forming acid rain",
)
DESIGN_SYSTEMS = (
    "a rainwater harvesting system for a primary school", "a small wind turbine for a remote farm",
    "a pedestrian bridge over a narrow river", "a greenhouse that stays warm in winter without fossil fuels",
    "an early-warning system for floods in a river valley", "a portable water filter for hikers",
    "a cooling system for a small data center", "a battery backup for a home with solar panels",
    "a composting system for an apartment building", "an irrigation system for a community garden",
    "a low-cost weather station for a school", "a bicycle-powered phone charger",
    "a noise barrier along a busy road", "a drone that monitors crops", "an insulated lunch box",
    "a sensor network that tracks air quality across a city",
)
DROP_OBJECTS = ("stone", "wrench", "tennis ball", "apple", "coin", "water balloon", "toy car", "bag of sand")
DROP_PLACES = ("on Earth", "on the Moon", "on Mars")
APPLIANCES = (  # (appliance, lowest and highest plausible power in watts)
    ("space heater", 750, 2000), ("refrigerator", 100, 250), ("gaming PC", 300, 800),
    ("electric kettle", 1500, 3000), ("washing machine", 400, 1200), ("ceiling fan", 40, 90),
    ("LED television", 60, 200), ("air conditioner", 900, 3500), ("laptop charger", 45, 100),
    ("dishwasher", 1200, 2400), ("hair dryer", 1000, 2000), ("aquarium heater", 50, 300),
)
MOVERS = ("car", "cyclist", "train", "sprinter", "motorboat", "elevator", "roller coaster", "skateboarder")

# ----------------------------------------------------------------------------------------------------
# Humanities
# ----------------------------------------------------------------------------------------------------

HISTORY = (
    "the fall of the Western Roman Empire", "the invention of the printing press",
    "the Industrial Revolution in Britain", "the Silk Road trade network", "the Meiji Restoration",
    "the French Revolution", "the space race", "the abolition of the Atlantic slave trade",
    "the Italian Renaissance", "the Black Death", "the Protestant Reformation",
    "the rise of the Mongol Empire",
    "the American civil rights movement", "the partition of India", "the collapse of the Soviet Union",
    "the Congress of Vienna", "the Great Depression", "the Marshall Plan", "the Haitian Revolution",
    "the Ottoman conquest of Constantinople", "the voyages of Zheng He", "the Scientific Revolution",
    "the unification of Germany", "the Mexican Revolution", "the decolonization of Africa", "the Magna Carta",
    "the building and fall of the Berlin Wall", "the Cuban Missile Crisis",
    "the Green Revolution in agriculture",
    "the Opium Wars", "democracy in ancient Athens", "the construction of the Great Wall",
    "the Inca road system",
    "the Viking expansion", "the Crusades", "the 1918 influenza pandemic", "the women's suffrage movement",
    "the Enlightenment", "the end of apartheid in South Africa", "the Suez Crisis",
)
HISTORY_PAIRS = (
    ("the Roman Republic", "the Roman Empire"), ("the American Revolution", "the French Revolution"),
    ("the Tang dynasty", "the Song dynasty"), ("the First World War", "the Second World War"),
    ("ancient Athens", "ancient Sparta"), ("the Aztec Empire", "the Inca Empire"),
    ("the Renaissance", "the Enlightenment"), ("the British Empire", "the Spanish Empire"),
    ("the Meiji Restoration", "Peter the Great's reforms in Russia"),
    ("the Industrial Revolution", "the digital revolution"), ("feudal Japan", "medieval Europe"),
    ("the printing press", "the internet"), ("the Byzantine Empire", "the Holy Roman Empire"),
    ("the Ottoman Empire", "the Mughal Empire"), ("the Great Depression", "the 2008 financial crisis"),
    ("the Cold War", "the Peloponnesian War"),
)
LESSON_LENGTHS = ("a single 45-minute class", "two 50-minute classes", "a week of daily lessons")
GRADE_LEVELS = ("middle school", "high school", "adult education", "first-year university")
ECONOMICS = (
    "inflation", "interest rates set by central banks", "comparative advantage", "supply and demand",
    "opportunity cost", "minimum wage laws", "tariffs and trade wars", "the gig economy",
    "economies of scale",
    "monopolies and market power", "externalities such as pollution", "government budget deficits",
    "unemployment", "exchange rates", "stock market bubbles", "progressive taxation", "behavioral economics",
    "the tragedy of the commons", "price elasticity", "global supply chains", "housing affordability",
    "microfinance", "cryptocurrency as money", "the circular economy", "productivity growth",
)
POLICIES = (
    "a four-day working week", "universal basic income", "congestion charges in city centers",
    "banning single-use plastics", "free public transport", "a tax on sugary drinks", "rent control",
    "compulsory voting", "lowering the voting age to sixteen", "school uniforms", "a carbon tax",
    "remote work as the default for office jobs", "banning smartphones in schools",
    "building more nuclear power plants", "free university tuition", "a maximum wage", "daylight saving time",
    "mandatory national service", "car-free city centers", "year-round schooling", "open-plan offices",
    "self-driving cars on public roads", "homework for primary school children", "a wealth tax",
    "visa-free travel between neighboring countries",
)
PHILOSOPHY = (
    "utilitarianism", "Kant's categorical imperative", "Stoicism", "existentialism", "social contract theory",
    "Plato's theory of forms", "Aristotle's virtue ethics", "Descartes' cogito", "the problem of free will",
    "moral relativism", "the ship of Theseus", "Rawls's veil of ignorance", "the problem of induction",
    "Confucian ethics", "the Buddhist idea of non-self", "the mind-body problem", "the trolley problem",
    "Epicureanism", "American pragmatism", "the paradox of tolerance", "Pascal's wager",
    "the Chinese room argument", "Nietzsche's idea of eternal recurrence", "the is-ought problem",
    "Occam's razor",
)
PHIL_VIEWS = (
    "a utilitarian", "a follower of Kant", "a Stoic", "a virtue ethicist", "an existentialist",
    "a care ethicist", "a Confucian scholar", "a libertarian",
)
DILEMMAS = (
    "Should you tell a friend that their partner is cheating on them?",
    "Is it acceptable to exaggerate on a CV if everyone else seems to?",
    "Should a doctor break confidentiality to warn someone in danger?",
    "Should you return a wallet full of cash when nobody would ever know?",
    "Is it right to break a promise in order to help a stranger in urgent need?",
    "Should a company reveal a safety flaw that will cost it millions?",
    "Is it fair to give a job to a friend over a better-qualified stranger?",
    "Should you report a colleague who takes small amounts of office supplies?",
    "Is it wrong to eat meat if you could easily avoid it?",
    "Should parents read their teenager's private messages?",
    "Should you donate to charity or save for your own children's education?",
    "Should a journalist publish leaked documents that could embarrass innocent people?",
    "Should a family hide a grave diagnosis from an elderly relative who asked to be told everything?",
    "Should rich countries accept more refugees?", "Should you lie to spare someone's feelings about a gift?",
    "Is it acceptable to skip the queue for a sick child?",
)
CULTURE = (
    "Impressionist painting", "Shakespeare's tragedies", "jazz", "the Harlem Renaissance", "Japanese haiku",
    "Gothic architecture", "Greek tragedy", "magical realism in Latin American literature",
    "Bollywood cinema",
    "hip hop", "the Bauhaus movement", "Renaissance sculpture", "the nineteenth-century Russian novel",
    "Persian miniature painting", "West African griot storytelling", "film noir", "Cubism", "opera",
    "the Romantic poets", "Chinese calligraphy", "street art", "Baroque music", "modernist architecture",
    "the blues", "Scandinavian crime fiction",
)
CULTURE_FORMATS = ("a short essay", "three paragraphs", "a list of five reasons",
                   "a dialogue between two students")
SOCIETY = (
    "social media", "remote work", "urbanization", "automation and artificial intelligence",
    "an aging population", "online education", "fast fashion", "streaming services", "mass tourism",
    "the decline of local newspapers", "climate migration", "smartphones", "the sharing economy",
    "video games", "influencer culture", "falling birth rates", "globalized food culture",
    "surveillance cameras in public spaces", "English as a global language", "loneliness in modern cities",
)
SOCIAL_GROUPS = (
    "young people", "small businesses", "rural communities", "older adults", "families", "workers",
    "cities", "schools",
)
THEMES = (
    "the Cold War", "how economies grow", "the ethics of technology", "immigration",
    "daily life in ancient Rome",
    "climate politics", "human rights", "the history of science", "colonialism",
    "the psychology of happiness",
    "life in medieval Europe", "how democracies fail", "religion and society", "the history of medicine",
    "modern China", "the Renaissance",
)
WORK_KINDS = ("novels", "non-fiction books", "documentaries", "feature films", "podcasts")

# ----------------------------------------------------------------------------------------------------
# Chat
# ----------------------------------------------------------------------------------------------------

HOWTO = (
    "remove a red wine stain from a carpet", "fix a flat tire on a bicycle",
    "make a budget I can actually stick to",
    "fix my sleep schedule", "start running without getting injured", "ask my manager for a raise",
    "unclog a kitchen sink without chemicals", "keep basil alive indoors", "back up the photos on my phone",
    "prepare for a job interview", "learn to touch type", "cook rice so it isn't mushy",
    "make cold brew coffee",
    "negotiate the price of a used car", "stop procrastinating on big projects", "organize a small closet",
    "clean a cast iron pan", "give a good wedding toast", "make friends in a new city", "memorize a speech",
    "calm down before an exam", "teach my dog to stop pulling on the leash", "secure my home Wi-Fi network",
    "choose a password manager", "reduce my screen time", "start a vegetable garden on a balcony",
    "read more books", "fix a squeaky door", "iron a shirt properly", "pack a suitcase efficiently",
    "write a polite complaint to a company", "start investing with a small amount of money",
    "get better at public speaking", "paint a room without making a mess", "learn a new language as an adult",
    "bake my own bread", "keep a conversation going on a first date", "prepare my car for winter",
    "sharpen a kitchen knife", "choose a laptop for university", "plan a birthday party for a six-year-old",
    "say no to extra work without sounding rude", "deal with jet lag", "stay focused while working from home",
    "improve my handwriting", "split bills fairly with roommates", "recover after a long hike",
    "take better photos with my phone", "keep my houseplants alive while I'm on holiday", "start journaling",
    "meal prep for the week", "teach a child to ride a bike", "remove a splinter safely",
    "care for a sourdough starter", "find a trustworthy mechanic", "pay off credit card debt faster",
    "write a short bio for a conference", "learn to juggle", "descale a kettle", "get rid of fruit flies",
)
TIP_ACTIVITIES = (
    "saving money on groceries", "staying productive when working from home", "traveling with a toddler",
    "learning to play the guitar", "studying for final exams", "running a first marathon",
    "hosting a dinner party", "keeping a small apartment tidy", "cutting down on sugar",
    "being a better listener",
    "networking at a conference", "growing tomatoes", "reducing household waste", "camping in the rain",
    "improving posture at a desk", "making a long flight more comfortable",
    "keeping kids busy on a rainy day",
    "writing clear emails", "moving to a new country", "buying a second-hand car", "hiking alone safely",
    "drinking more water", "managing stress at work", "building a morning routine",
    "learning to swim as an adult", "looking after a new puppy", "making a small room look bigger",
    "saving energy at home in winter", "preparing for a long bike tour", "eating healthily on a budget",
    "starting a podcast", "finishing a first novel", "improving at chess", "keeping a New Year's resolution",
    "hosting a board game night", "photographing the night sky", "teaching a teenager to drive",
    "working night shifts", "staying motivated at the gym", "planning a wedding on a budget",
    "living with roommates", "caring for an elderly parent", "learning to code", "reducing food waste",
    "decluttering a garage", "writing a college application essay", "buying a first home",
    "painting with watercolors", "volunteering in my community", "selling things online",
    "traveling solo for the first time", "making better coffee at home", "keeping cut flowers fresh",
    "dealing with a noisy neighbor", "preparing for a hurricane", "cooking for one person",
    "choosing running shoes", "improving my credit score", "practicing mindfulness",
    "getting through a long winter",
)
TIP_EXTRAS = ("", " Keep each tip to one sentence.", " Explain why each one works.", " I'm a total beginner.",
              " Put the most important one first.", " Skip the obvious ones.")
COMPARE_PAIRS = (
    ("renting an apartment", "buying a house"), ("an e-reader", "paper books"),
    ("baking soda", "baking powder"),
    ("a latte", "a cappuccino"), ("yoga", "pilates"), ("a laptop", "a tablet"),
    ("a hybrid car", "an electric car"),
    ("credit cards", "debit cards"), ("butter", "margarine"), ("stocks", "bonds"),
    ("a gas stove", "an induction cooktop"), ("Android phones", "iPhones"),
    ("learning piano", "learning guitar"),
    ("running outdoors", "running on a treadmill"), ("a cat", "a dog"), ("freelancing", "a full-time job"),
    ("city life", "country life"), ("a road bike", "a mountain bike"), ("a savings account", "an index fund"),
    ("a heat pump", "a gas boiler"), ("public schools", "private schools"),
    ("hardwood floors", "laminate floors"),
    ("a backpack", "a rolling suitcase"), ("a hostel", "a hotel"), ("whole wheat bread", "white bread"),
    ("vinyl records", "music streaming"), ("a standing desk", "a regular desk"),
    ("strength training", "cardio"),
    ("green tea", "black tea"), ("a fixed-rate mortgage", "a variable-rate mortgage"),
    ("a password manager", "a notebook of passwords"), ("an air fryer", "a convection oven"),
    ("a gap year", "going straight to university"), ("buying a new car", "leasing a car"),
    ("contact lenses", "glasses"), ("a travel agent", "booking everything online"), ("a Mac", "a Windows PC"),
    ("an electric toothbrush", "a manual toothbrush"), ("a gym membership", "working out at home"),
    ("a cruise", "a road trip"),
)
COMPARE_EXTRAS = ("", " Which one should I pick?", " Please give a short answer.", " Use a simple example.")
ADVICE_FOR = (
    "a busy parent", "a college student", "someone who travels a lot", "a retiree", "a first-time buyer",
    "someone on a tight budget", "a small family", "a person who works from home",
)
TERMS = (
    "compound interest", "a carbon footprint", "net neutrality", "an index fund", "cognitive dissonance",
    "the sunk cost fallacy", "impostor syndrome", "gaslighting", "FOMO", "a credit score", "gentrification",
    "an API", "the cloud", "a VPN", "two-factor authentication", "machine learning", "a placebo", "umami",
    "al dente", "sous vide cooking", "mindfulness", "burnout", "a hedge fund", "a recession", "due diligence",
    "a bear market", "home equity", "a fiduciary", "the Dunning-Kruger effect", "confirmation bias", "a meme",
    "open source software", "a carbon offset", "an annuity", "quiet quitting", "an insurance deductible",
    "a growth mindset", "an escrow account", "a blockchain", "a capsule wardrobe", "a minimum viable product",
    "a tariff", "gerrymandering", "a filibuster", "the Overton window", "a pyramid scheme", "a cover letter",
    "jet lag", "a side hustle", "a carbon tax",
)
SITUATIONS = (
    "My roommate keeps eating my food and I don't want to start a fight.",
    "I got two job offers: one pays more, the other has a much shorter commute.",
    "My best friend forgot my birthday and I feel hurt.",
    "I have three exams next week and I haven't started studying.", "My neighbor's dog barks all night.",
    "I want to quit my job to start a business, but I'm scared.",
    "My teenage son spends all his free time playing video games.",
    "A coworker keeps taking credit for my work.",
    "I spent too much money last month and rent is due soon.",
    "I'm moving to a new city where I don't know anyone.",
    "My parents want me to study medicine, but I love art.",
    "I keep waking up at 4 a.m. and can't fall back asleep.",
    "My friend asked to borrow a large amount of money.",
    "I was offered a promotion that means managing my former teammates.",
    "My landlord hasn't fixed the heating for two weeks.",
    "I accidentally sent a rude message to the wrong group chat.",
    "I feel stuck learning Spanish after a year of lessons.",
    "My partner and I disagree about where to spend the holidays.",
    "I have a job interview tomorrow and I'm very nervous.",
    "My small online shop gets visitors but almost no sales.", "I want to get fit, but I hate gyms.",
    "My elderly father refuses to stop driving.",
    "I was invited to a wedding on the same day as my sister's graduation.",
    "My laptop is slow and I can't afford a new one.", "I'm always late, no matter how hard I try.",
    "I received a performance review that I think was unfair.", "My kids fight every morning before school.",
    "I'd like to change careers into data analysis at 40.",
    "My friends are planning a trip that I can't afford.", "I lent a book to someone and they lost it.",
    "I have too many subscriptions and don't know which to cancel.",
    "I want to ask someone out but I'm afraid of rejection.",
    "My manager messages me late at night and expects quick replies.",
    "I'd like to adopt a cat but I live in a small studio.",
    "I keep buying vegetables that go bad before I use them.",
    "My team missed an important deadline and I'm the project lead.",
    "My grandmother wants to learn to use a smartphone.",
    "I was overcharged on my phone bill and customer service isn't helping.",
    "I've been feeling unmotivated at work for months.",
    "I want to start saving for retirement, but I'm already 35.",
)
SITUATION_ASKS = (
    "What should I do?", "Any advice?", "How should I handle this?", "What are my options?",
    "Can you help me think this through?",
)
GIFT_RECIPIENTS = (
    "my dad", "my grandmother", "a coworker", "my ten-year-old niece", "my best friend", "a teacher",
    "my partner", "a new neighbor", "my teenage brother", "my boss", "a friend who just moved",
    "my mother-in-law",
)
HOBBIES = (
    "gardening", "cooking", "hiking", "board games", "photography", "mystery novels", "yoga", "baking",
    "fishing", "video games", "painting", "camping", "knitting", "astronomy", "coffee", "music", "running",
    "bird watching", "history", "woodworking", "traveling", "tea", "puzzles", "cycling", "dancing",
)
GIFT_BUDGETS = ("", " My budget is about $30.", " Nothing too expensive, please.",
                " I'd like something personal or handmade.")
LISTABLES = (
    "healthy breakfast ideas", "ways to save energy at home", "fun things to do on a rainy weekend",
    "questions to ask at the end of a job interview", "easy houseplants for beginners", "cheap date ideas",
    "ways to be more productive in the morning", "classic novels that are easy to read",
    "foods that are high in protein", "stretches to do at a desk", "icebreaker questions for a team meeting",
    "signs that a car needs new tires", "ways to use less plastic", "skills that are useful in any job",
    "meals you can cook in 15 minutes", "things to pack for a beach holiday",
    "hobbies you can start for free",
    "ways to organize a small kitchen", "good habits for online privacy", "ideas for a family picnic",
    "ways to practice gratitude", "things to check before signing a lease",
    "vegetables that grow well in pots",
    "exercises you can do without equipment", "science activities for kids at home",
    "ways to drink less coffee", "questions to ask a new doctor", "ways to make a long drive more fun",
    "interesting facts about the ocean", "ways to welcome a new coworker",
)
EVERYDAY_WHYS = (
    "my phone battery drain faster in cold weather", "bread go stale", "my coffee sometimes taste bitter",
    "my cat knock things off tables", "it feel harder to wake up in winter",
    "my houseplant have yellow leaves",
    "a song get stuck in my head", "my Wi-Fi get slower in the evening",
    "my car use more fuel in winter", "a slowly cooked onion taste sweet", "my jeans fade after washing",
    "ice cream give me a headache when I eat it quickly", "my dog tilt its head when I talk",
    "airplane food taste bland", "my glasses fog up when I come inside",
    "tap water taste different in other cities",
    "my muscles hurt two days after exercise", "my feet swell on long flights", "my laptop fan get so loud",
    "time seem to pass faster as I get older",
)
WHY_EXTRAS = ("", " Is there anything I can do about it?", " Please keep the explanation simple.")
TOPIC_EXTRAS = ("", " Keep it to a few sentences.", " I'd love a surprising fact or two.")
TRIP_LENGTHS = ("one-day", "two-day", "three-day", "five-day")
TRAVELERS = (
    "a family with two young kids", "a couple on a budget", "a solo traveler who loves museums",
    "two friends who love hiking", "a retired couple who prefer a slow pace", "a food lover",
)
FRIDGE_CONTENTS = (
    "eggs, spinach and some leftover rice", "canned chickpeas, tomatoes and an onion",
    "chicken thighs, potatoes and lemons", "pasta, garlic and a can of tuna", "tofu, broccoli and soy sauce",
    "black beans, tortillas and cheese", "lentils, carrots and curry powder", "ground beef, peppers and rice",
    "salmon, asparagus and new potatoes", "mushrooms, cream and a bit of parmesan",
    "sweet potatoes, kale and feta", "cabbage, sausages and apples", "couscous, zucchini and chickpeas",
    "shrimp, coconut milk and limes", "stale bread, eggs and some old vegetables", "quinoa, avocado and corn",
    "pork chops, apples and onions", "noodles, peanut butter and cucumbers",
    "halloumi, tomatoes and pita bread",
    "frozen peas, bacon and pasta",
)
COOK_EXTRAS = ("", " I have about 30 minutes.", " Nothing too spicy, please.",
               " I'd like something my kids will eat.")
HABITS = (
    "running", "meditating", "waking up earlier", "learning Italian", "cooking at home", "journaling",
    "drinking less alcohol", "reading every day", "stretching", "saving money", "practicing the piano",
    "drawing", "going to bed earlier", "strength training", "eating more vegetables", "cycling to work",
    "writing poetry", "swimming", "learning Python", "spending less time on social media",
)
PLAN_LENGTHS = ("two-week", "30-day", "eight-week", "three-month")

# ----------------------------------------------------------------------------------------------------
# Extraction: synthetic paragraphs (filled with random names, dates, amounts) plus what to extract
# ----------------------------------------------------------------------------------------------------

EXTRACT_FORMATS = ("a JSON object", "a bulleted list", "a Markdown table", "CSV with a header row", "YAML",
                   "a numbered list")
INDUSTRIES = ("climate-tech", "health-tech", "education", "logistics", "food-delivery", "cybersecurity",
              "gaming", "agritech", "fintech", "robotics")
FESTIVALS = (
    ("Food and Wine Festival", "the old harbor warehouses"), ("Jazz Weekend", "the city park bandstand"),
    ("International Book Fair", "the convention center"), ("Science Week", "the university campus"),
    ("Short Film Festival", "the Rialto cinema"), ("Craft Beer Festival", "the former railway depot"),
    ("Design Biennale", "the riverside gallery district"), ("Lantern Festival", "the botanical gardens"),
)
MEETING_TEAMS = (
    ("marketing", "content designer"), ("product", "data analyst"), ("operations", "warehouse supervisor"),
    ("finance", "payroll specialist"), ("engineering", "backend developer"), ("sales", "account manager"),
    ("customer support", "team lead"), ("research", "lab assistant"),
)
REVIEW_ITEMS = ("blender", "desk lamp", "backpack", "coffee grinder", "bike lock", "rice cooker",
                "bluetooth speaker", "hiking boots", "electric toothbrush", "office chair")
HOTELS = ("Harbor View Hotel", "Old Town Inn", "Garden Suites", "Riverside Lodge", "Station Hotel",
          "Cedar House", "Grand Plaza Hotel", "Hilltop Guesthouse")
STUDY_FIELDS = ("marine biology", "architecture", "economics", "computer science", "music composition",
                "civil engineering", "medicine", "journalism", "mathematics", "art history")
TEAM_NICKNAMES = ("Rovers", "Falcons", "United", "Lions", "Harriers", "Athletic", "Comets", "Wanderers",
                  "Rangers", "Titans")
HOME_TYPES = ("townhouse", "ground-floor apartment", "cottage", "loft apartment", "semi-detached house",
              "farmhouse", "penthouse", "bungalow")

# kind: (paragraph template, enumerated slot name, its values, random number ranges, instructions)
EXTRACTION_KINDS = (
    (("{co1}, a {industry} start-up based in {city}, announced on {d1} that it has raised {m1} in a funding "
      "round led by {co2}. Chief executive {p1} {s1}, who founded the company in {y} together with {p2} "
      "{s2}, said the money will pay for {n1} new hires and a second office in {c1}, due to open by {d3}. "
      "The firm reported revenue of {m2} last year and now serves customers in {n2} countries."),
     "industry", INDUSTRIES, {"y": (2008, 2021), "n1": (10, 150), "n2": (3, 40)},
     ("Extract the company name, home city, amount raised, lead investor and chief executive.",
      "List every person and organization mentioned, together with their role.",
      "Pull out all dates and amounts of money, and say what each one refers to.",
      "Identify the founders, the founding year and the location of the planned new office.")),
    (("Early-bird tickets for the {fest[0]} in {city} are on sale until {d1}, and the festival itself runs "
      "from {d2} to {d3}, with most events at {fest[1]}. Organizers expect around {n1},000 visitors. Day "
      "passes cost ${adult} for adults and ${student} for students, and children under {n2} get in free. "
      "This year's program includes talks by {p1} {s1} and {p2} {s2}, and the closing night is hosted by "
      "{p3} {s3}."),
     "fest", FESTIVALS, {"n1": (5, 90), "n2": (6, 14), "adult": (25, 90), "student": (10, 24)},
     ("Extract the event name, city, venue, start and end dates, and ticket prices.",
      "List every person mentioned and their role at the event.",
      "Pull out all the numbers in the text and say what each one refers to.",
      "Summarize what a visitor needs to know: when, where and how much.")),
    (("Notes from the {team[0]} team meeting on {d1}, {city} office. Present: {p1}, {p2}, {p3} and {p4}. "
      "{p1} will send the revised budget of ${budget},000 to finance by {d2}. {p2} agreed to interview "
      "candidates for the open {team[1]} position before the end of the month. {p3} raised concerns about "
      "delivery delays from {co1}; {p4} will call their account manager this week. Next meeting: {d3}."),
     "team", MEETING_TEAMS, {"budget": (20, 900)},
     ("List every action item with its owner and deadline.",
      "Extract the attendees, the meeting date and the date of the next meeting.",
      "Identify any risks or concerns that were raised, and who raised them.",
      "Write down who is responsible for what, one short line per person.")),
    (("Review by {p1} from {city} ({n1} out of 5 stars): This {item} is excellent value. It arrived quickly "
      "and has worked perfectly for a month.\nReview by {p2} ({n2} out of 5 stars): My {item} stopped "
      "working after two weeks, and customer service took {n3} days to answer my email.\nReview by {p3} (3 "
      "out of 5 stars): It does the job, but it is heavier than the photos suggest, and at {pr1} it feels "
      "overpriced."),
     "item", REVIEW_ITEMS, {"n1": (4, 5), "n2": (1, 2), "n3": (3, 12)},
     ("For each review, extract the reviewer's name, the star rating and the main point they make.",
      "Classify each review as positive, negative or mixed, with a one-line reason.",
      "List every problem with the product that the reviewers mention.",
      "Compute the average star rating and say what the reviewers liked and disliked.")),
    (("Booking confirmation for {p1} {s1}. Outbound flight XR{fl} leaves {city} on {d1} at {h}:{mm:02d} and "
      "lands in {c1} the same evening; the return flight departs on {d2}. Hotel: {hotel}, {n1} nights at "
      "${rate} per night, breakfast included. An airport transfer with {co1} has been booked for {pr2}. "
      "Booking reference: BK{ref}."),
     "hotel", HOTELS, {"fl": (100, 999), "h": (6, 21), "mm": (0, 59), "n1": (2, 9), "rate": (60, 320),
                       "ref": (100000, 999999)},
     ("Extract the traveler's name, the flight number, the travel dates, the hotel and the number of nights.",
      "Turn this confirmation into a short itinerary, one entry per date.",
      "List every cost mentioned and work out the total price of the hotel stay.",
      "Pull out all dates, times and reference numbers, and label each one.")),
    (("{co1} is hiring a {job} to join its growing team in {city}. The successful candidate will report to "
      "{p1} {s1} and work closely with colleagues in {c1}. Requirements: at least {n1} years of relevant "
      "experience, strong communication skills and a willingness to travel up to {n2} days a month. The "
      "salary range is ${sal1},000 to ${sal2},000 per year, plus {n3} days of paid leave. Applications close "
      "on {d2}, and interviews will take place in the week of {d3}."),
     "job", JOBS, {"n1": (1, 8), "n2": (2, 6), "sal1": (35, 60), "sal2": (65, 95), "n3": (20, 30)},
     ("Extract the job title, company, location, salary range and application deadline.",
      "List the requirements for the role as separate items.",
      "Pull out every date and number and say what it refers to.",
      "Identify the people and places mentioned in the posting.")),
    (("{p1} {s1} was born in {city} in {y}. After studying {field} in {c1}, {p1} worked for {n1} years at "
      "{co1} before founding {co2} with {p2} {s2}. {p1}'s first book came out in {y2} and won a national "
      "prize. Today {p1} lives in {c2} and teaches part-time."),
     "field", STUDY_FIELDS, {"y": (1950, 1975), "y2": (1998, 2020), "n1": (3, 15)},
     ("Extract the person's name, birthplace, birth year, field of study and current city.",
      "Build a timeline of the events in this biography.",
      "List every organization and place mentioned and its connection to the person.",
      "State where the person was born, what they studied and what they founded.")),
    (("{city} {nick} beat {c1} City 3-1 on {d1} in front of {n1},000 fans. {p1} {s1} opened the scoring "
      "after {n2} minutes, and {p2} {s2} added a second goal just before half-time. {c1} pulled one back "
      "through {p3} {s3}, but {p4} {s4} sealed the win late on. The result lifts the {nick} to within {n3} "
      "points of the top of the league."),
     "nick", TEAM_NICKNAMES, {"n1": (8, 60), "n2": (3, 40), "n3": (1, 9)},
     ("Extract the two teams, the final score, the date and the attendance.",
      "List every goal scorer with their team.",
      "Pull out all the numbers in the report and explain what each means.",
      "Write the key facts of this match report as short items.")),
    (("For sale in {city}: a {n1}-bedroom {home}, built in {y} and renovated in {y2}. The property has {n2} "
      "bathrooms and a garden of about {n3} square meters, and it is a {n4}-minute walk from the nearest "
      "train station. Asking price: ${price},000. Viewings can be arranged through {p1} {s1} at {co1} until "
      "{d2}. The current owners, {p2} and {p3} {s2}, are moving to {c1}."),
     "home", HOME_TYPES, {"n1": (1, 5), "y": (1920, 1995), "y2": (2005, 2023), "n2": (2, 3),
                          "n3": (20, 600), "n4": (3, 25), "price": (150, 950)},
     ("Extract the number of bedrooms and bathrooms, the asking price and the agent's name.",
      "List all the facts about the property's location.",
      "Pull out every year and number in the listing and label each one.",
      "Summarize the listing for a buyer as a few key facts.")),
)
EXTRACTION_LAYOUTS = (
    ("{instr} Present the result as {fmt}.\n\n", ""),
    ("Read the text below.\n\n", "\n\n{instr} Format your answer as {fmt}."),
)


# ----------------------------------------------------------------------------------------------------
# Code completion: function specs with reference implementations (examples are computed, never typed)
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FnSpec:
    name: str
    params: str
    returns: str
    doc: str
    impl: Callable[..., object]
    examples: tuple[tuple[object, ...], ...]


def _fn(name: str, params: str, returns: str, doc: str, impl: Callable[..., object],
        *examples: tuple) -> _FnSpec:
    return _FnSpec(name, params, returns, doc, impl, examples)


def _rotate_right(items: list, k: int) -> list:
    k = k % len(items) if items else 0
    return items[len(items) - k:] + items[:len(items) - k]


def _valid_ipv4(address: str) -> bool:
    parts = address.split(".")
    return len(parts) == 4 and all(p.isdigit() and str(int(p)) == p and int(p) <= 255 for p in parts)


def _max_subarray(values: list[int]) -> int:
    return max(sum(values[i:j]) for i in range(len(values)) for j in range(i + 1, len(values) + 1))


FUNCTIONS = (
    _fn("running_totals", "values: List[int]", "List[int]",
        "Return a list whose element i is the sum of values[0] through values[i].",
        lambda v: list(itertools.accumulate(v)), ([3, 1, 4, 1],), ([],)),
    _fn("count_words", "text: str", "int",
        "Count the words in text. Words are separated by any run of whitespace.",
        lambda s: len(s.split()), ("hello big world",), ("   ",)),
    _fn("capitalize_words", "text: str", "str",
        "Upper-case the first letter of every space-separated word in text and leave the other letters "
        "alone.",
        lambda s: " ".join(w[:1].upper() + w[1:] for w in s.split(" ")), ("the quick fox",), ("a bC",)),
    _fn("second_largest", "values: List[int]", "int",
        "Return the second largest distinct value. The list always holds at least two distinct values.",
        lambda v: sorted(set(v))[-2], ([4, 1, 4, 3],), ([10, 20],)),
    _fn("chunk_list", "items: List[int], size: int", "List[List[int]]",
        "Split items into consecutive pieces of length size; the final piece may be shorter.",
        lambda v, k: [v[i:i + k] for i in range(0, len(v), k)], ([1, 2, 3, 4, 5], 2), ([], 3)),
    _fn("merge_sorted_lists", "first: List[int], second: List[int]", "List[int]",
        "Combine two lists that are each in ascending order into a single ascending list.",
        lambda a, b: sorted(a + b), ([1, 4, 9], [2, 3, 10]), ([], [5])),
    _fn("is_anagram", "first: str, second: str", "bool",
        "Tell whether the two strings use exactly the same letters the same number of times, "
        "ignoring case and spaces.",
        lambda a, b: sorted(a.replace(" ", "").lower()) == sorted(b.replace(" ", "").lower()),
        ("Listen", "Silent"), ("apple", "paper")),
    _fn("reverse_word_order", "sentence: str", "str",
        "Return the sentence with its words in reverse order. Words are separated by single spaces.",
        lambda s: " ".join(reversed(s.split(" "))), ("one two three",), ("solo",)),
    _fn("count_vowel_letters", "text: str", "int",
        "Count the characters of text that are one of a, e, i, o, u, in either case.",
        lambda s: sum(c in "aeiou" for c in s.lower()), ("Programming",), ("rhythm",)),
    _fn("sum_of_digits", "number: int", "int",
        "Add up the decimal digits of a non-negative integer.",
        lambda n: sum(map(int, str(n))), (1234,), (0,)),
    _fn("digital_root", "number: int", "int",
        "Keep adding the digits of a non-negative integer until one digit is left, and return that digit.",
        lambda n: 0 if n == 0 else 1 + (n - 1) % 9, (9875,), (0,)),
    _fn("is_leap_year", "year: int", "bool",
        "Apply the Gregorian calendar rules: a year divisible by 4 is a leap year, except century years, "
        "which must be divisible by 400.",
        calendar.isleap, (2000,), (1900,), (2024,)),
    _fn("celsius_to_fahrenheit", "celsius: float", "float",
        "Convert a temperature in degrees Celsius to degrees Fahrenheit.",
        lambda c: c * 9 / 5 + 32, (100.0,), (-40.0,)),
    _fn("format_duration", "seconds: int", "str",
        "Format a non-negative number of seconds as H:MM:SS, with hours not padded.",
        lambda s: f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}", (3725,), (59,)),
    _fn("snake_to_camel", "identifier: str", "str",
        "Turn a snake_case identifier into camelCase.",
        lambda s: s.split("_")[0] + "".join(w.capitalize() for w in s.split("_")[1:]),
        ("max_retry_count",), ("value",)),
    _fn("camel_to_snake", "identifier: str", "str",
        "Turn a camelCase identifier into snake_case.",
        lambda s: "".join("_" + c.lower() if c.isupper() else c for c in s), ("parseHttpHeader",), ("id",)),
    _fn("run_length_encode", "text: str", "str",
        "Replace every run of a repeated character by the character followed by the length of the run.",
        lambda s: "".join(f"{k}{len(list(g))}" for k, g in itertools.groupby(s)), ("aaabcc",), ("",)),
    _fn("run_length_decode", "encoded: str", "str",
        "Undo run-length encoding: each character is followed by how many times it repeats.",
        lambda s: "".join(c * int(k) for c, k in re.findall(r"(\D)(\d+)", s)), ("a3b1c2",), ("x10",)),
    _fn("caesar_shift", "text: str, shift: int", "str",
        "Move each lowercase letter forward by shift places in the alphabet, wrapping from z back to a. "
        "Every other character is kept as it is.",
        lambda s, k: "".join(chr((ord(c) - 97 + k) % 26 + 97) if "a" <= c <= "z" else c for c in s),
        ("hello, world", 3), ("xyz", 2)),
    _fn("is_pangram", "sentence: str", "bool",
        "Tell whether the sentence contains every letter of the English alphabet at least once, ignoring "
        "case.",
        lambda s: set(string.ascii_lowercase) <= set(s.lower()),
        ("Pack my box with five dozen liquor jugs",), ("Hello there",)),
    _fn("longest_common_prefix", "words: List[str]", "str",
        "Return the longest string that every word in the list starts with.",
        os.path.commonprefix, (["flower", "flow", "flight"],), (["dog", "car"],)),
    _fn("most_frequent_value", "values: List[int]", "int",
        "Return the value that occurs most often in a non-empty list; on a tie, return the smallest such "
        "value.",
        lambda v: min(v, key=lambda x: (-v.count(x), x)), ([3, 1, 3, 2, 1],), ([7],)),
    _fn("flatten_once", "nested: List[List[int]]", "List[int]",
        "Join the inner lists into one list, keeping their order.",
        lambda n: [x for inner in n for x in inner], ([[1, 2], [], [3]],), ([],)),
    _fn("transpose_matrix", "matrix: List[List[int]]", "List[List[int]]",
        "Swap rows and columns of a rectangular matrix given as a list of rows.",
        lambda m: [list(r) for r in zip(*m)], ([[1, 2, 3], [4, 5, 6]],), ([[7]],)),
    _fn("rotate_right", "items: List[int], steps: int", "List[int]",
        "Shift the list to the right by steps positions; items falling off the end wrap around to the front.",
        _rotate_right, ([1, 2, 3, 4, 5], 2), ([1, 2, 3], 4), ([], 1)),
    _fn("two_sum_indices", "values: List[int], target: int", "Tuple[int, int]",
        "Return the index pair (i, j) with i < j and values[i] + values[j] == target, choosing the smallest "
        "i and then the smallest j. Such a pair always exists.",
        lambda v, t: next((i, j) for i in range(len(v)) for j in range(i + 1, len(v)) if v[i] + v[j] == t),
        ([2, 7, 11, 15], 9), ([3, 2, 4], 6)),
    _fn("find_missing_number", "values: List[int]", "int",
        "The list holds every integer from 1 to n exactly once except one of them, in any order. "
        "Return the one that is absent.",
        lambda v: (len(v) + 1) * (len(v) + 2) // 2 - sum(v), ([3, 1, 5, 2],), ([2],)),
    _fn("max_subarray_sum", "values: List[int]", "int",
        "Return the largest sum of a non-empty run of consecutive elements.",
        _max_subarray, ([-2, 1, -3, 4, -1, 2, 1, -5, 4],), ([-3, -1, -2],)),
    _fn("is_perfect_number", "number: int", "bool",
        "A perfect number equals the sum of its divisors smaller than itself. Tell whether number is one.",
        lambda n: n > 1 and sum(d for d in range(1, n) if n % d == 0) == n, (28,), (12,)),
    _fn("is_armstrong_number", "number: int", "bool",
        "Tell whether a non-negative integer equals the sum of its digits, each raised to the power of the "
        "number of digits.",
        lambda n: n == sum(int(d) ** len(str(n)) for d in str(n)), (153,), (154,)),
    _fn("primes_below", "limit: int", "List[int]",
        "List every prime number smaller than limit in increasing order.",
        lambda n: [p for p in range(2, n) if all(p % d for d in range(2, math.isqrt(p) + 1))], (12,), (2,)),
    _fn("least_common_multiple", "a: int, b: int", "int",
        "Return the smallest positive integer that both positive integers a and b divide.",
        lambda a, b: a * b // math.gcd(a, b), (4, 6), (7, 5)),
    _fn("tally_items", "items: List[str]", "Dict[str, int]",
        "Map each distinct item to how many times it occurs, in order of first appearance.",
        lambda v: dict(Counter(v)), (["a", "b", "a"],), ([],)),
    _fn("group_by_initial", "words: List[str]", "Dict[str, List[str]]",
        "Group non-empty words under their lower-cased first letter, keeping the original order in each "
        "group.",
        lambda ws: {k: [w for w in ws if w[0].lower() == k] for k in dict.fromkeys(w[0].lower() for w in ws)},
        (["apple", "Avocado", "banana"],), ([],)),
    _fn("invert_mapping", "mapping: Dict[str, int]", "Dict[int, List[str]]",
        "Build a dictionary from each value to the list of keys that had it, keys in insertion order.",
        lambda m: {v: [k for k in m if m[k] == v] for v in dict.fromkeys(m.values())},
        ({"x": 1, "y": 2, "z": 1},), ({},)),
    _fn("flatten_two_levels", "nested: Dict[str, Dict[str, int]]", "Dict[str, int]",
        "Turn a dictionary of dictionaries into one dictionary whose keys join the outer and inner key "
        "with a dot.",
        lambda n: {f"{o}.{i}": v for o, d in n.items() for i, v in d.items()},
        ({"a": {"x": 1, "y": 2}, "b": {"z": 3}},)),
    _fn("is_valid_ipv4", "address: str", "bool",
        "Tell whether address is four dot-separated decimal numbers from 0 to 255, with no leading zeros.",
        _valid_ipv4, ("192.168.0.1",), ("256.1.1.1",), ("1.2.3",), ("01.2.3.4",)),
    _fn("hamming_distance", "first: str, second: str", "int",
        "Count the positions at which two strings of equal length hold different characters.",
        lambda a, b: sum(x != y for x, y in zip(a, b)), ("karolin", "kathrin"), ("abc", "abc")),
    _fn("dedupe_keep_order", "items: List[int]", "List[int]",
        "Drop repeated values, keeping only the first occurrence of each, in their original order.",
        lambda v: list(dict.fromkeys(v)), ([3, 1, 3, 2, 1],), ([],)),
    _fn("interleave_lists", "first: List[int], second: List[int]", "List[int]",
        "Take elements alternately from first and second, starting with first; once one list runs out, "
        "append what remains of the other.",
        lambda a, b: [x for pair in itertools.zip_longest(a, b) for x in pair if x is not None],
        ([1, 2, 3], [10, 20]), ([], [4, 5])),
    _fn("clamp_values", "values: List[float], low: float, high: float", "List[float]",
        "Limit every value to the closed interval from low to high.",
        lambda v, lo, hi: [min(max(x, lo), hi) for x in v], ([-1.5, 0.5, 2.5], 0.0, 1.0)),
    _fn("normalize_spaces", "text: str", "str",
        "Strip leading and trailing whitespace and collapse every inner run of whitespace to one space.",
        lambda s: " ".join(s.split()), ("  too   many\tspaces here ",), ("",)),
    _fn("has_unique_letters", "word: str", "bool",
        "Tell whether no letter appears twice in word when case is ignored.",
        lambda w: len(set(w.lower())) == len(w), ("Machine",), ("letter",)),
    _fn("classify_characters", "text: str", "Dict[str, int]",
        "Count letters, digits and all other characters; return them under the keys 'letters', 'digits' "
        "and 'other'.",
        lambda s: {"letters": sum(c.isalpha() for c in s), "digits": sum(c.isdigit() for c in s),
                   "other": sum(not c.isalnum() for c in s)}, ("a1 b2!",)),
    _fn("matrix_trace", "matrix: List[List[int]]", "int",
        "Return the sum of the main diagonal of a square matrix.",
        lambda m: sum(m[i][i] for i in range(len(m))), ([[1, 2], [3, 4]],), ([[5]],)),
    _fn("dot_product", "first: List[int], second: List[int]", "int",
        "Multiply two equally long vectors element by element and add up the products.",
        lambda a, b: sum(x * y for x, y in zip(a, b)), ([1, 2, 3], [4, 5, 6]), ([], [])),
    _fn("window_averages", "values: List[float], window: int", "List[float]",
        "Return the average of every run of window consecutive values, from left to right.",
        lambda v, w: [sum(v[i:i + w]) / w for i in range(len(v) - w + 1)], ([2.0, 4.0, 6.0, 8.0], 3)),
    _fn("pascal_row", "row: int", "List[int]",
        "Return the given row of Pascal's triangle, where row 0 is [1].",
        lambda n: [math.comb(n, k) for k in range(n + 1)], (4,), (0,)),
    _fn("to_binary_string", "number: int", "str",
        "Write a non-negative integer in base 2, without any prefix.",
        lambda n: format(n, "b"), (10,), (0,)),
    _fn("parse_binary", "bits: str", "int",
        "Read a string of 0s and 1s as a base-2 number.",
        lambda s: int(s, 2), ("1010",), ("0",)),
    _fn("count_set_bits", "number: int", "int",
        "Return how many 1 bits appear in the binary form of a non-negative integer.",
        lambda n: n.bit_count(), (13,), (0,)),
    _fn("gcd_of_list", "values: List[int]", "int",
        "Return the largest positive integer that divides every value in a non-empty list of positive "
        "integers.",
        lambda v: functools.reduce(math.gcd, v), ([12, 18, 30],), ([7],)),
    _fn("multiply_all", "values: List[int]", "int",
        "Return the product of the values; the product of an empty list is 1.",
        math.prod, ([2, 3, 4],), ([],)),
    _fn("summary_stats", "values: List[float]", "Tuple[float, float, float]",
        "Return (minimum, maximum, arithmetic mean) of a non-empty list.",
        lambda v: (min(v), max(v), sum(v) / len(v)), ([2.0, 4.0, 9.0],)),
    _fn("truncate_words", "text: str, limit: int", "str",
        "Keep the first limit words of text, joined by single spaces, and append '...' if anything was cut.",
        lambda s, k: " ".join(s.split()[:k]) + ("..." if len(s.split()) > k else ""),
        ("one two three four", 2), ("short text", 5)),
    _fn("mask_card_number", "card: str", "str",
        "Hide all but the last four characters of a card number behind '*' characters.",
        lambda s: "*" * (len(s) - 4) + s[-4:], ("1234567812345678",), ("9876",)),
    _fn("name_initials", "full_name: str", "str",
        "Return the upper-case first letter of every word in full_name, each followed by a period.",
        lambda s: "".join(w[0].upper() + "." for w in s.split()), ("ada lovelace",),
        ("grace brewster hopper",)),
    _fn("map_word_lengths", "sentence: str", "Dict[str, int]",
        "Map every whitespace-separated word of the sentence to its length.",
        lambda s: {w: len(w) for w in s.split()}, ("red green blue",)),
    _fn("first_longest_word", "sentence: str", "str",
        "Return the longest word in a non-empty sentence; if several share that length, return the first "
        "one.",
        lambda s: max(s.split(), key=len), ("a bb ccc dd eee",)),
    _fn("is_sentence_palindrome", "text: str", "bool",
        "Tell whether text reads the same forwards and backwards once case, spaces and punctuation are "
        "ignored.",
        lambda s: [c.lower() for c in s if c.isalnum()] == [c.lower() for c in reversed(s) if c.isalnum()],
        ("Never odd or even",), ("Open a door",)),
    _fn("squares_of_evens", "values: List[int]", "List[int]",
        "Return the square of every even value, in the original order.",
        lambda v: [x * x for x in v if x % 2 == 0], ([1, 2, 3, 4],), ([5, 7],)),
    _fn("split_even_odd", "values: List[int]", "Tuple[List[int], List[int]]",
        "Separate the values into (evens, odds), each keeping the original order.",
        lambda v: ([x for x in v if x % 2 == 0], [x for x in v if x % 2]), ([5, 2, 8, 1],)),
    _fn("kth_smallest", "values: List[int], k: int", "int",
        "Return the k-th smallest value, counting from 1, of a list with at least k elements.",
        lambda v, k: sorted(v)[k - 1], ([7, 2, 9, 4], 2), ([5], 1)),
    _fn("overlap_length", "start_a: int, end_a: int, start_b: int, end_b: int", "int",
        "Return the length of the overlap of the half-open ranges [start_a, end_a) and [start_b, end_b), "
        "or 0 when they do not overlap.",
        lambda a0, a1, b0, b1: max(0, min(a1, b1) - max(a0, b0)), (1, 5, 3, 9), (0, 2, 4, 6)),
    _fn("days_in_month", "year: int, month: int", "int",
        "Return the number of days in the given month (1 to 12) of the given Gregorian year.",
        lambda y, m: calendar.monthrange(y, m)[1], (2024, 2), (2023, 4)),
    _fn("weekday_name", "year: int, month: int, day: int", "str",
        "Return the English name of the weekday that falls on the given date.",
        lambda y, m, d: calendar.day_name[datetime.date(y, m, d).weekday()], (2024, 1, 1), (2000, 2, 29)),
    _fn("average_word_length", "sentence: str", "float",
        "Return the mean length of the words in a non-empty sentence, rounded to two decimals.",
        lambda s: round(sum(map(len, s.split())) / len(s.split()), 2), ("the cat sat",), ("hi there",)),
    _fn("percentage_change", "old: float, new: float", "float",
        "Return the change from old to new as a percentage of old, rounded to two decimals.",
        lambda a, b: round((b - a) / a * 100, 2), (50.0, 75.0), (80.0, 60.0)),
    _fn("apply_discount", "price: float, percent: float", "float",
        "Return the price after taking percent off, rounded to cents.",
        lambda p, q: round(p * (1 - q / 100), 2), (80.0, 25.0), (19.99, 10.0)),
    _fn("compound_balance", "principal: float, rate: float, years: int", "float",
        "Return the balance after compounding principal once a year at rate percent for the given years, "
        "rounded to cents.",
        lambda p, r, y: round(p * (1 + r / 100) ** y, 2), (1000.0, 5.0, 2), (250.0, 0.0, 10)),
    _fn("vowel_positions", "word: str", "List[int]",
        "Return the indices of the characters in word that are vowels (a, e, i, o, u), ignoring case.",
        lambda w: [i for i, c in enumerate(w) if c.lower() in "aeiou"], ("banana",), ("Sky",)),
    _fn("strip_punctuation", "text: str", "str",
        "Delete every ASCII punctuation character from text.",
        lambda s: "".join(c for c in s if c not in string.punctuation), ("Hi, there! OK?",), ("plain",)),
    _fn("nth_triangular_number", "n: int", "int",
        "Return the n-th triangular number, the number of dots in a triangle with n rows.",
        lambda n: n * (n + 1) // 2, (4,), (1,)),
    _fn("is_power_of_two", "number: int", "bool",
        "Tell whether number equals 2 raised to some non-negative integer power.",
        lambda n: n > 0 and n & (n - 1) == 0, (64,), (96,), (1,)),
    _fn("zip_to_dict", "keys: List[str], values: List[int]", "Dict[str, int]",
        "Pair up keys and values of equal length into a dictionary.",
        lambda k, v: dict(zip(k, v)), (["a", "b"], [1, 2]), ([], [])),
    _fn("keep_long_words", "words: List[str], min_length: int", "List[str]",
        "Keep only the words whose length is at least min_length, in the original order.",
        lambda ws, k: [w for w in ws if len(w) >= k], (["hi", "hello", "hey"], 3)),
    _fn("sort_by_length", "words: List[str]", "List[str]",
        "Order the words from shortest to longest; words of equal length keep their relative order.",
        lambda ws: sorted(ws, key=len), (["pear", "fig", "banana"],), (["bb", "aa"],)),
    _fn("names_by_age", "people: List[Tuple[str, int]]", "List[str]",
        "Given (name, age) pairs, return the names from youngest to oldest, breaking ties alphabetically.",
        lambda ps: [n for n, a in sorted(ps, key=lambda p: (p[1], p[0]))],
        ([("Ana", 31), ("Bo", 25), ("Cy", 31)],)),
    _fn("find_all_indices", "items: List[int], target: int", "List[int]",
        "Return every index at which target occurs in items.",
        lambda v, t: [i for i, x in enumerate(v) if x == t], ([1, 3, 1, 2, 1], 1), ([4, 5], 9)),
    _fn("consecutive_differences", "values: List[int]", "List[int]",
        "Return each value minus the one before it, starting from the second value.",
        lambda v: [b - a for a, b in itertools.pairwise(v)], ([1, 4, 9, 16],), ([5],)),
    _fn("is_arithmetic_progression", "values: List[int]", "bool",
        "Tell whether the gap between neighbouring values is the same throughout the list.",
        lambda v: len({b - a for a, b in itertools.pairwise(v)}) <= 1, ([3, 7, 11, 15],), ([1, 2, 4],)),
    _fn("make_acronym", "phrase: str", "str",
        "Build an upper-case acronym from the first letter of each word; hyphens separate words too.",
        lambda s: "".join(w[0].upper() for w in s.replace("-", " ").split()),
        ("portable network graphics",), ("self-contained underwater breathing apparatus",)),
    _fn("left_pad", "text: str, width: int, fill: str", "str",
        "Pad text on the left with the single character fill until it is width characters long.",
        lambda s, w, f: s.rjust(w, f), ("42", 5, "0"), ("long", 2, "*")),
    _fn("count_nonempty_lines", "text: str", "int",
        "Count the lines of text that contain something other than whitespace.",
        lambda s: sum(1 for line in s.splitlines() if line.strip()), ("a\n\n b\n",), ("",)),
    _fn("every_other_item", "items: List[str]", "List[str]",
        "Return the items at positions 0, 2, 4 and so on.",
        lambda v: v[::2], (["a", "b", "c", "d", "e"],), ([],)),
    _fn("sum_multiples_of_3_or_5", "limit: int", "int",
        "Add up all positive integers below limit that are divisible by 3 or by 5.",
        lambda n: sum(x for x in range(n) if x % 3 == 0 or x % 5 == 0), (10,), (1,)),
    _fn("is_non_decreasing", "values: List[int]", "bool",
        "Tell whether each value is at least as large as the one before it.",
        lambda v: all(a <= b for a, b in itertools.pairwise(v)), ([1, 2, 2, 5],), ([3, 1],)),
    _fn("count_distinct_words", "sentence: str", "int",
        "Count how many different words the sentence uses, ignoring case.",
        lambda s: len({w.lower() for w in s.split()}), ("The cat saw the dog",), ("",)),
)
COMPLETION_ASKS = (
    "Complete the following Python function.", "Finish the implementation of this function:",
    "Write the body of the function below.",
    "Implement this function so that it does what its docstring says.",
    "Fill in the missing code:", "Here is a function stub. Complete it.", "Continue this Python code:",
    "Complete the function below and return only the code.",
)
COMPLETION_FENCED_ASKS = (
    "Please implement the following function in Python.", "Write a correct and efficient implementation:",
    "Finish this function and briefly explain your approach.", "Complete this function. Keep it simple.",
    "Can you fill in this function for me?", "Implement the function below, handling edge cases carefully.",
)
COMPLETION_AFTER_ASKS = (
    "Implement the function above.", "Please write the function body.",
    "How would you complete this function?",
    "Finish this code so that it matches its docstring.", "Complete the code above in idiomatic Python.",
)


# ----------------------------------------------------------------------------------------------------
# Families
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """One template. `slots` are enumerated (they decide the prompt's identity and the capacity); `nums` are
    random integers; `extra(rng, values)` computes further fields from the chosen ones."""

    template: str
    slots: tuple[tuple[str, Sequence[object]], ...]
    nums: tuple[tuple[str, tuple[int, int]], ...] = ()
    extra: Callable[[random.Random, dict], dict] | None = None

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.slots)


def _fam(template: str, nums: dict | None = None, extra: Callable | None = None,
         **slots: Sequence[object]) -> _Family:
    return _Family(template, tuple(slots.items()), tuple((nums or {}).items()), extra)


def _join_seq(terms: Sequence[int]) -> dict:
    return {"seq": ", ".join(map(str, terms))}


def _fib_like(a: int, b: int) -> list[int]:
    terms = [a, b]
    while len(terms) < 6:
        terms.append(terms[-1] + terms[-2])
    return terms


def _quadratic_from_roots(rng: random.Random, _: dict) -> dict:
    low, high = rng.randint(1, 9), rng.randint(10, 15)
    return {"s": low + high, "p": low * high}


def _coprime_jugs(rng: random.Random, _: dict) -> dict:
    a = rng.randint(3, 8)
    b = rng.choice([x for x in range(a + 1, 14) if math.gcd(a, x) == 1])
    return {"a": a, "b": b, "c": rng.choice([x for x in range(1, b) if x != a])}


def _writing() -> list[_Family]:
    x = WRITING_EXTRAS
    return [
        _fam("Write a lively travel blog post about {duration} in {place}, focusing on {focus}.{x}",
             duration=DURATIONS, place=PLACES, focus=TRAVEL_FOCUS, x=x),
        _fam("Draft a {tone} email to {case[0]} {case[1]}.{x}", tone=EMAIL_TONES, case=EMAIL_CASES, x=x),
        _fam("Write a short story about {who} who {event}.{x}", who=CHARACTERS, event=EVENTS, x=STORY_EXTRAS),
        _fam("Write a {form} about {subject}.{x}", form=POEM_FORMS, subject=POEM_SUBJECTS, x=POEM_EXTRAS),
        _fam("Write a product description for {product}, aimed at {audience}.{x}",
             product=PRODUCTS, audience=AUDIENCES, x=x),
        _fam("Write a {length} speech for {occasion}.{x}", length=SPEECH_LENGTHS, occasion=OCCASIONS, x=x),
        _fam("Write a persuasive {piece} arguing that {claim}.{x}", piece=PIECES, claim=CLAIMS, x=x),
        _fam("Write a cover letter for a {job} position. The applicant {exp}.{x}", job=JOBS, exp=EXPERIENCE,
             x=x),
        _fam('Rewrite this sentence so that it sounds more {tone}: "{sentence}"',
             tone=REWRITE_TONES, sentence=BLUNT_SENTENCES),
        _fam("Create an outline for a blog post comparing {pair[0]} and {pair[1]}, with a heading and a "
             "one-line summary for each section.{x}", pair=COMPARE_PAIRS, x=x),
        _fam("Describe {scene} using vivid sensory details: sights, sounds, smells and textures.{x}",
             scene=SCENES, x=x),
        _fam("Come up with {k} catchy slogans for {business}.{x}", k=COUNT_WORDS, business=BUSINESSES,
             x=("", " Keep each one under eight words.", " Make at least one of them a pun.")),
        _fam("I run {business} in {city}. {situation} Please write {piece}.{x}",
             business=BUSINESSES, city=CITIES, situation=BRIEF_SITUATIONS, piece=BRIEF_PIECES, x=x),
        _fam("Write a blog post about {topic} for {audience}.{x}", topic=GENERAL_TOPICS, audience=AUDIENCES,
             x=x),
    ]


def _roleplay() -> list[_Family]:
    x = ROLE_EXTRAS
    return [
        _fam("Imagine you are {pa[0]}. {pa[1]}{x}", pa=PERSONA_ASKS, x=x),
        _fam("Act as {pa[0]} and stay in that role for this conversation. My first question: {pa[1]}{x}",
             pa=PERSONA_ASKS, x=x),
        _fam('You are {pa[0]}. {visitor} asks you: "{pa[1]}" How do you reply?{x}',
             pa=PERSONA_ASKS, visitor=tuple(v[0].upper() + v[1:] for v in ROLE_VISITORS), x=x),
        _fam("Pretend you are {persona} and write a diary entry about {day}.{x}",
             persona=PERSONA_NAMES, day=DIARY_DAYS, x=x),
        _fam("Let's role-play. You are {sc[0]} and I am {sc[1]}.{goal} Please start the conversation.",
             sc=ROLE_SCENARIOS, goal=ROLE_GOALS),
        _fam("I'd like to rehearse a conversation. Play {sc[0]}; I'll be {sc[1]}.{goal} Stay in your role "
             "and wait for my replies.", sc=ROLE_SCENARIOS, goal=ROLE_GOALS),
        _fam("Take on the role of {case[0]}. I will describe my situation and you will give me practical "
             "advice. My situation: {case[1]}{x}", case=ADVISOR_CASES, x=x),
    ]


def _reasoning() -> list[_Family]:
    names = NAMES
    families = [
        _fam("{name}, {p1}, {p2} and {p3} are friends. {name} is {t[0]} than {p1} but not as {t[1]} as {p3}, "
             "and {p2} is the {t[2]} of the four. Who is the {t[3]}? Put all four in order.", name=names,
             t=TRAITS),
        _fam("In a {contest}, {name} scored more points than {p1}, and {p2} scored fewer points than {p1} "
             "but more than {p3}. Who came second, and who came last?", name=names, contest=CONTESTS),
        _fam("{name} is {p1}'s {r1}, and {p1} is {p2}'s {r2}. What is the relationship between {name} and "
             "{p2}? Explain your reasoning and mention any ambiguity.", name=names, r1=RELATIONS_A,
             r2=RELATIONS_B),
        _fam("All {t[0]} are {t[1]}, and all {t[1]} are {t[2]}. Is it necessarily true that all {t[0]} are "
             "{t[2]}? Explain.", t=SYLLOGISM_TERMS),
        _fam("All {t[0]} are {t[1]}. Some {t[1]} are {t[2]}. Can we conclude that some {t[0]} are {t[2]}? "
             "Justify your answer.", t=SYLLOGISM_TERMS),
        _fam("Suppose that no {t[0]} are {t[1]}, and that some {t[2]} are {t[0]}. What, if anything, follows "
             "about {t[2]} and {t[1]}?", t=SYLLOGISM_TERMS),
        _fam("Statement one: some {t[1]} are {t[0]}. Statement two: no {t[0]} are {t[2]}. Statement three: "
             "some {t[1]} are not {t[2]}. If the first two statements are true, is the third true, false or "
             "uncertain?", t=SYLLOGISM_TERMS),
        _fam("{frame[0]}{seq}{frame[1]}", frame=SEQUENCE_FRAMES, start=range(1, 31), step=range(2, 13),
             extra=lambda rng, v: _join_seq([v["start"] + i * v["step"] for i in range(5)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=SEQUENCE_FRAMES, start=range(1, 10), ratio=range(2, 5),
             extra=lambda rng, v: _join_seq([v["start"] * v["ratio"] ** i for i in range(5)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=SEQUENCE_FRAMES, a=range(1, 10), b=range(1, 10),
             extra=lambda rng, v: _join_seq(_fib_like(v["a"], v["b"]))),
        _fam("{frame[0]}{seq}{frame[1]}", frame=SEQUENCE_FRAMES, c=range(25),
             extra=lambda rng, v: _join_seq([i * i + v["c"] for i in range(1, 6)])),
        _fam("{frame[0]}{seq}{frame[1]}", frame=SEQUENCE_FRAMES, up=range(4, 12), down=range(1, 4),
             extra=lambda rng, v: _join_seq(list(itertools.accumulate(
                 [rng.randint(1, 20)] + [v["up"] if i % 2 == 0 else -v["down"] for i in range(6)])))),
        _fam("If {a} days ago was a {day}, what day of the week will it be {b} days from today?",
             a=range(2, 60), day=WEEKDAYS, nums={"b": (3, 200)}),
        _fam("Today is {day}. What day of the week will it be in {a} days, and what day was it {b} days ago?",
             day=WEEKDAYS, a=range(10, 400), nums={"b": (5, 100)}),
        _fam("On an island, knights always tell the truth and knaves always lie. {name} says, \"{p1} and I "
             "are both knaves.\" What are {name} and {p1}?", name=names),
        _fam("Every islander is either a knight, who always tells the truth, or a knave, who always lies. "
             "{name} says, \"{p1} is a knave.\" {p1} says, \"{name} and I are the same kind.\" Who is a "
             "knight and who is a knave?", name=names),
        _fam("{name}, {p1} and {p2} are each a knight (always truthful) or a knave (always lying). {name} "
             "says, \"Exactly one of us is a knave.\" {p1} says, \"{name} is lying.\" {p2} stays silent. "
             "What can you conclude about each of them?", name=names),
        _fam("{frame[0]}{words}{frame[1]}", frame=ODD_FRAMES, group=ODD_ONE_OUT,
             extra=lambda rng, v: {"words": ", ".join(rng.sample(v["group"], len(v["group"])))}),
        _fam("{name}, {p1} and {p2} each picked a different {kind[0]} from this list: {kind[1]}, {kind[2]}, "
             "{kind[3]}. {name} did not pick {kind[1]}, and {p2} picked {kind[2]}. Who picked which "
             "{kind[0]}?",
             name=names, kind=PICK_KINDS),
        _fam("What is the angle between the hour hand and the minute hand of a clock at {h}:{m:02d}?",
             h=range(1, 13), m=range(0, 60, 5)),
        _fam("At {h}:{m:02d}, what is the smaller angle formed by the two hands of an analog clock? Show "
             "your calculation.", h=range(1, 13), m=range(0, 60, 5)),
        _fam("You have {n} {things} that look identical, but one is slightly heavier than the others. Using "
             "a two-pan balance, what is the smallest number of weighings that always finds the heavy one?",
             n=range(3, 100), things=WEIGH_THINGS),
        _fam("{name} leaves home and walks {a} meters {d}, turns {t1} and walks {b} meters, then turns {t2} "
             "and walks {c} meters. Which way is {name} facing now, and how far is {name} from home in a "
             "straight line?", name=names, d=DIRECTIONS, t1=TURNS, t2=TURNS,
             nums={"a": (100, 900), "b": (100, 900), "c": (100, 900)}),
        _fam("At a {event} with {n} people, everyone shakes hands with everyone else exactly once. How many "
             "handshakes take place?", event=GATHERINGS, n=range(4, 61)),
        _fam("In a {sport} league, each of {n} teams plays every other team exactly once. How many games are "
             "played? How many if every pair meets twice?", sport=LEAGUE_SPORTS, n=range(4, 33)),
        _fam("{name} has a {a}-liter {cup} and a {b}-liter {cup}, and unlimited water. How can {name} "
             "measure exactly {c} liters? List the steps.", name=names, cup=CONTAINERS, extra=_coprime_jugs),
        _fam("In {a} years, {name} will be twice as old as {name} was {b} years ago. How old is {name} now?",
             name=names, nums={"a": (2, 30), "b": (2, 15)}),
        _fam("{name} is three times as old as {p1}. In {a} years, {name} will be only twice as old as {p1}. "
             "How old are they now?", name=names, nums={"a": (2, 20)}),
        _fam("How many times does the digit {d} appear when you write out every whole number from 1 to {n}?",
             d=range(1, 10), n=(99, 100, 250, 500, 1000)),
    ]
    return families


def _math() -> list[_Family]:
    names = NAMES
    return [
        _fam("{name} buys {a} {item[0]} at ${b} each and one {item[1]} for ${c}. {name} pays with ${d}. How "
             "much change should {name} get?", name=names, item=ITEM_PAIRS,
             nums={"a": (2, 6), "b": (2, 15), "c": (5, 40)}, extra=lambda rng,
             v: {"d": 50 * rng.randint(3, 6)}),
        _fam("At a market, {name} spends ${b} on each of {a} {item[0]} and ${c} on a {item[1]}. If {name} "
             "had ${d} that morning, what fraction of it is left?", name=names, item=ITEM_PAIRS,
             nums={"a": (2, 6), "b": (2, 15), "c": (5, 40), "d": (150, 300)}),
        _fam("{name} travels {trip}: the first {a} km at {b} km/h and the remaining {c} km at {d} km/h. What "
             "is the average speed for the whole trip?", name=names, trip=TRIPS,
             nums={"a": (20, 200), "b": (30, 110), "c": (20, 200), "d": (30, 110)}),
        _fam("{name} can {chore} in {a} hours, while {p1} needs {b} hours for the same job. How long will it "
             "take if they work together?", name=names, chore=CHORES, nums={"a": (2, 9), "b": (3, 12)}),
        _fam("A {item} costs ${a}. The store takes {b}% off, and then {c}% sales tax is added to the reduced "
             "price. How much does {name} pay at the register?", name=names, item=SHOP_ITEMS,
             nums={"a": (40, 900), "b": (5, 40), "c": (5, 12)}),
        _fam("{name} puts ${a:,} into a savings account that pays {b}% {kind}. How much money will be in the "
             "account after {c} years?", name=names, kind=ACCOUNT_KINDS,
             nums={"a": (500, 20000), "b": (1, 8), "c": (2, 15)}),
        _fam("{name}'s rectangular {plot} is {a} m long and {b} m wide. A path {c} m wide is built around "
             "the outside of it. What is the area of the path, and what does it cost to pave at ${d} per "
             "square "
             "meter?", name=names, plot=PLOTS, nums={"a": (8, 60), "b": (5, 40), "c": (1, 3), "d": (10, 90)}),
        _fam("{name} is {a} years old, and {name}'s {rel} is {b} times as old. In how many years will the "
             "{rel} be exactly twice {name}'s "
             "age?", name=names, rel=RELATIVES, nums={"a": (4, 15), "b": (3, 5)}),
        _fam("{name} has taken {k} {subject} tests with an average score of {a}. What score does {name} need "
             "on the next test to bring the average up to {b}?", name=names, subject=SCHOOL_SUBJECTS,
             nums={"k": (3, 8), "a": (60, 85)}, extra=lambda rng, v: {"b": v["a"] + rng.randint(2, 6)}),
        _fam("A recipe for {dish} serves {a} people and uses {b} grams of flour and {c} ml of milk. How much "
             "flour and milk does {name} need to make it for {d} people?", name=names, dish=DISHES,
             nums={"a": (2, 6), "b": (100, 500), "c": (150, 600), "d": (7, 30)}),
        _fam("A bag holds {a} red, {b} blue and {c} green {things}. {name} draws two at random without "
             "putting the first one back. What is the probability that both are {color}?", name=names,
             things=DRAW_THINGS, color=COLORS, nums={"a": (2, 9), "b": (2, 9), "c": (2, 9)}),
        _fam("Solve for {var}: {a}{var} + {b} = {c}{var} - {d}.{ask}", var=VARIABLES, ask=MATH_ASKS,
             nums={"a": (5, 12), "b": (1, 30), "c": (1, 4), "d": (1, 30)}),
        _fam("Find all real values of {var} such that {var}^2 - {s}{var} + {p} = 0.{ask}", var=VARIABLES,
             ask=MATH_ASKS, extra=_quadratic_from_roots),
        _fam("Let g({var}) = {a}{var}^2 - {b}{var} + {c}. What is g({d}), and for which {var} is g "
             "smallest?{ask}",
             var=VARIABLES, ask=MATH_ASKS, nums={"a": (1, 6), "b": (1, 20), "c": (1, 30), "d": (2, 9)}),
        _fam("{name} takes a train that leaves {city} at {h}:{mm:02d}. The train covers {d} km at an average "
             "speed of {s} km/h. At what time does {name} arrive?", name=names, city=CITIES,
             nums={"h": (5, 20), "mm": (0, 59), "d": (60, 600), "s": (60, 200)}),
        _fam("In a group of {a} {group}, {b}% {act[0]}, {c}% {act[1]}, and {d}% do both. How many of them do "
             "neither?", group=GROUP_NOUNS, act=ACTIVITY_PAIRS,
             nums={"b": (30, 55), "c": (20, 40), "d": (5, 15)},
             extra=lambda rng, v: {"a": 20 * rng.randint(3, 20)}),
        _fam("{name}'s {vehicle} uses {a} liters of fuel per 100 km, and fuel costs ${b}.{c:02d} per liter. "
             "How much will the fuel cost for a {d} km round trip?", name=names, vehicle=VEHICLES,
             nums={"a": (4, 12), "b": (1, 2), "c": (0, 99), "d": (50, 900)}),
        _fam("{name} read {f1} of a {pages}-page book on Monday and {f2} of the remaining pages on Tuesday. "
             "How many pages are still unread?", name=names, f1=FRACTIONS_FIRST, f2=FRACTIONS_SECOND,
             extra=lambda rng, v: {"pages": 240 * rng.randint(1, 3)}),
    ]


def _coding() -> list[_Family]:
    tasks, x = CODE_TASKS, CODE_EXTRAS
    return [
        _fam("Write a Python function that {task}.{x}", task=tasks, x=x),
        _fam("Can you write Python code that {task}?{x}", task=tasks, x=x),
        _fam("I'm learning Python. Show me a program that {task}, and explain how each part works.{x}",
             task=tasks, x=x),
        _fam("Build a small Python program that {task}, {style}. Then describe two edge cases it has to "
             "handle.",
             task=tasks, style=CODE_STYLES),
        _fam("My Python code that {task} is slow on large inputs. What would an efficient version look like, "
             "and why is it faster?", task=tasks),
        _fam("Write unit tests for a Python function that {task}. Cover normal inputs and edge cases.",
             task=tasks),
        _fam("Review this plan: I want a Python module that {task}. What functions or classes should it "
             "have, and how would you write the core of it?{x}", task=tasks, x=x),
        _fam("Write a function in {lang} that {task}.{x}", lang=OTHER_LANGUAGES, task=tasks, x=x),
        _fam("{frame[0]}{sql}{frame[1]}{x}", frame=SQL_FRAMES, sql=SQL_TASKS, x=SQL_EXTRAS),
    ]


def _extraction() -> list[_Family]:
    families = []
    for paragraph, key, values, nums, instructions in EXTRACTION_KINDS:
        for head, tail in EXTRACTION_LAYOUTS:
            families.append(_fam(head + paragraph + tail, nums=nums, city=CITIES, instr=instructions,
                                 fmt=EXTRACT_FORMATS, **{key: values}))
    return families


def _stem() -> list[_Family]:
    x = EXPLAIN_EXTRAS
    return [
        _fam("Explain {concept}{aud}.{x}", concept=SCIENCE_CONCEPTS, aud=AUDIENCE_PHRASES, x=x),
        _fam("What is {concept}, and why does it matter in everyday life?{x}", concept=SCIENCE_CONCEPTS, x=x),
        _fam("Walk me through {concept} step by step, starting from the basic idea.{x}",
             concept=SCIENCE_CONCEPTS, x=x),
        _fam("What are the most common misconceptions about {concept}, and what is actually true?{x}",
             concept=SCIENCE_CONCEPTS, x=x),
        _fam("Describe a simple experiment or everyday observation that shows {concept} in action.{x}",
             concept=SCIENCE_CONCEPTS, x=x),
        _fam("Compare {pair[0]} and {pair[1]}. What do they have in common, and how do they differ?{x}",
             pair=STEM_PAIRS, x=x),
        _fam("Why {why}? Explain the science behind it.{x}", why=STEM_WHYS, x=x),
        _fam("Write the balanced chemical equation for {reaction} and explain what happens at the level of "
             "atoms and molecules.{x}", reaction=REACTIONS, x=x),
        _fam("You are designing {system}. What are the key components and trade-offs you would consider?{x}",
             system=DESIGN_SYSTEMS, x=x),
        _fam("A {obj} is dropped from a height of {h} meters {where}. Ignoring air resistance, how long does "
             "it take to reach the ground, and how fast is it moving just before impact?",
             obj=DROP_OBJECTS, where=DROP_PLACES, nums={"h": (5, 120)}),
        _fam("{name}'s {app[0]} is rated at {w} watts and runs for {h} hours a day. How many kilowatt-hours "
             "does it use in a 30-day month, and what does that cost at {c} cents per kWh?", name=NAMES,
             app=APPLIANCES, nums={"h": (1, 12), "c": (9, 45)},
             extra=lambda rng, v: {"w": 10 * rng.randint(v["app"][1] // 10, v["app"][2] // 10)}),
        _fam("A {mover} speeds up uniformly from rest to {v} m/s in {t} seconds. What is its acceleration, "
             "and how far does it travel in that time?", mover=MOVERS, nums={"v": (3, 40), "t": (2, 30)}),
    ]


def _humanities() -> list[_Family]:
    x = EXPLAIN_EXTRAS
    return [
        _fam("What were the main causes and consequences of {event}?{x}", event=HISTORY, x=x),
        _fam("Write a short essay on {event} and its lasting influence.{x}", event=HISTORY, x=x),
        _fam("Create a lesson plan for {length} on {event} for {grade} students. Include activities and "
             "discussion questions.", length=LESSON_LENGTHS, event=HISTORY, grade=GRADE_LEVELS),
        _fam("Compare {pair[0]} and {pair[1]}: how were they similar, and how did they differ?{x}",
             pair=HISTORY_PAIRS, x=x),
        _fam("Explain {topic} and its effect on ordinary households.{x}", topic=ECONOMICS, x=x),
        _fam("What are the strongest arguments for and against {policy}?{x}", policy=POLICIES, x=x),
        _fam("Explain {idea} in plain language, then give one objection to it and a possible reply.{x}",
             idea=PHILOSOPHY, x=x),
        _fam("How would {view} think about this dilemma? {dilemma}", view=PHIL_VIEWS, dilemma=DILEMMAS),
        _fam("Describe the key features of {art} and name a few representative works or figures.{x}",
             art=CULTURE, x=x),
        _fam("Why does {art} still matter today? Answer with {form}.", art=CULTURE, form=CULTURE_FORMATS),
        _fam("Discuss the impact of {trend} on {group}.{x}", trend=SOCIETY, group=SOCIAL_GROUPS, x=x),
        _fam("Suggest {k} {works} for someone who wants to understand {theme}, with one sentence on why each "
             "is worth it.", k=COUNT_WORDS, works=WORK_KINDS, theme=THEMES),
    ]


def _chat() -> list[_Family]:
    return [
        _fam("How do I {task}?{x}", task=HOWTO, x=CHAT_EXTRAS),
        _fam("Give me {k} practical tips for {activity}.{x}", k=COUNT_WORDS, activity=TIP_ACTIVITIES,
             x=TIP_EXTRAS),
        _fam("What's the difference between {pair[0]} and {pair[1]}?{x}", pair=COMPARE_PAIRS,
             x=COMPARE_EXTRAS),
        _fam("{pair[0]} or {pair[1]}: which is better for {who}, and why?",
             pair=tuple((a[0].upper() + a[1:], b) for a, b in COMPARE_PAIRS), who=ADVICE_FOR),
        _fam("What does {term} mean? Explain it with an example.", term=TERMS),
        _fam("Can you define {term} in one short paragraph?", term=TERMS),
        _fam("Explain {term} like I'm five.", term=TERMS),
        _fam("{situation} {ask}", situation=SITUATIONS, ask=SITUATION_ASKS),
        _fam("Suggest {k} gift ideas for {who} who loves {hobby}.{x}", k=COUNT_WORDS[:3], who=GIFT_RECIPIENTS,
             hobby=HOBBIES, x=GIFT_BUDGETS),
        _fam("List {k} {things}.", k=COUNT_WORDS, things=LISTABLES),
        _fam("Why does {why}?{x}", why=EVERYDAY_WHYS, x=WHY_EXTRAS),
        _fam("Tell me something interesting about {topic}.{x}", topic=GENERAL_TOPICS, x=TOPIC_EXTRAS),
        _fam("Can you plan a {days} itinerary in {place} for {who}?", days=TRIP_LENGTHS, place=PLACES,
             who=TRAVELERS),
        _fam("What can I cook for dinner if I have {food}?{x}", food=FRIDGE_CONTENTS, x=COOK_EXTRAS),
        _fam("I want to start {habit}. Can you make me a simple {length} plan?", habit=HABITS,
             length=PLAN_LENGTHS),
    ]


def _render_function(spec: _FnSpec, style: int, with_examples: bool) -> str:
    """Style 0: `typing` imports and a docstring opening on the `def` line; style 1: built-in generics and
    a docstring with its summary on its own line and an Examples section."""
    params, returns = spec.params, spec.returns
    generics = sorted(set(re.findall(r"\b(Dict|List|Tuple)\[", params + returns)))
    if style == 1:
        params, returns = (re.sub(r"\b(Dict|List|Tuple)\[", lambda m: m.group(1).lower() + "[", s)
                           for s in (params, returns))
    calls = [f">>> {spec.name}({', '.join(map(repr, args))})\n{spec.impl(*args)!r}".replace("\\", "\\\\")
             for args in spec.examples]  # escaped: the docstrings are not raw strings
    lines = [line for call in calls for line in call.split("\n")] if with_examples else []
    if style == 0:
        head = f"from typing import {', '.join(generics)}\n\n\n" if generics else ""
        body = textwrap.wrap('"""' + spec.doc, 80) + lines + ['"""']
    else:
        head = ""
        examples = ["", "Examples:"] + ["    " + line for line in lines] if lines else []
        body = ['"""'] + textwrap.wrap(spec.doc, 80) + examples + ['"""']
    return head + f"def {spec.name}({params}) -> {returns}:\n" + "".join(
        f"    {line}\n" if line else "\n" for line in body)


def _code_completion() -> list[_Family]:
    code = tuple(_render_function(spec, style, ex) for spec in FUNCTIONS for style in (0, 1) for ex in (True,
        False))
    return [
        _fam("{code}", code=code),
        _fam("{ask}\n\n{code}", ask=COMPLETION_ASKS, code=code),
        _fam("{ask}\n\n```python\n{code}```", ask=COMPLETION_FENCED_ASKS, code=code),
        _fam("```python\n{code}```\n\n{ask}", ask=COMPLETION_AFTER_ASKS, code=code),
    ]


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, tuple[_Family, ...]]:
    builders = {
        "writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "math": _math, "coding": _coding,
        "extraction": _extraction, "stem": _stem, "humanities": _humanities, "chat": _chat,
        "code_completion": _code_completion,
    }
    return {category: tuple(builders[category]()) for category in CATEGORIES}


# ----------------------------------------------------------------------------------------------------
# Building the pool
# ----------------------------------------------------------------------------------------------------


def pool_capacity() -> int:
    """How many distinct prompts the templates can make (the largest `n` for `build_prompt_pool`)."""
    return sum(family.size for families in _catalog().values() for family in families)


def _allocate(n: int, caps: Sequence[int]) -> list[int]:
    """Split n as evenly as possible over bins with the given capacities (requires n <= sum(caps))."""
    counts = [0] * len(caps)
    open_bins = [i for i, cap in enumerate(caps) if cap > 0]
    while n and open_bins:
        share, extra = divmod(n, len(open_bins))
        for rank, i in enumerate(open_bins):
            take = min(caps[i] - counts[i], share + (rank < extra))
            counts[i] += take
            n -= take
        open_bins = [i for i in open_bins if counts[i] < caps[i]]
    return counts


def _random_fields(rng: random.Random, chosen: dict) -> dict:
    """Decorations shared by all templates: people, places, companies, dates (d1 < d2 < d3), amounts."""
    names = [p for p in rng.sample(NAMES, 5) if p != chosen.get("name")][:4]
    cities = [c for c in rng.sample(CITIES, 3) if c != chosen.get("city")][:2]
    fields = {f"p{i}": p for i, p in enumerate(names, 1)}
    fields.update({f"s{i}": s for i, s in enumerate(rng.sample(SURNAMES, 4), 1)})
    fields.update({f"co{i}": c for i, c in enumerate(rng.sample(COMPANIES, 2), 1)})
    fields.update({f"c{i}": c for i, c in enumerate(cities, 1)})
    start = datetime.date(2023, 1, 1)
    for i, offset in enumerate(sorted(rng.sample(range(900), 3)), 1):
        day = start + datetime.timedelta(days=offset)
        fields[f"d{i}"] = f"{day:%B} {day.day}, {day.year}"
    for i in (1, 2):
        fields[f"m{i}"] = f"${rng.randint(12, 480) / 10:g} million"
        fields[f"pr{i}"] = f"${rng.randint(5, 120)}"
    return fields


def _render(family: _Family, index: int, rng: random.Random) -> str:
    chosen = {}
    for key, values in family.slots:
        index, position = divmod(index, len(values))
        chosen[key] = values[position]
    fields = _random_fields(rng, chosen)
    fields.update({key: rng.randint(low, high) for key, (low, high) in family.nums})
    fields.update(chosen)
    if family.extra is not None:
        fields.update(family.extra(rng, fields))
    text = family.template.format(**fields)
    return "\n".join(line.rstrip() for line in text.strip().split("\n"))


def build_prompt_pool(n: int, seed: int = 0) -> list[PoolPrompt]:
    """n unique prompts, categories mixed roughly evenly (code_completion + coding together ~20%),
    deterministic for a given (n, seed)."""
    capacity = pool_capacity()
    if not 0 <= n <= capacity:
        raise ValueError(f"n={n} is out of range: the templates can make at most {capacity} distinct prompts")
    rng = random.Random(seed)
    catalog = _catalog()
    category_caps = [sum(f.size for f in catalog[c]) for c in CATEGORIES]
    pool = []
    for category, quota in zip(CATEGORIES, _allocate(n, category_caps)):
        families = catalog[category]
        for family, count in zip(families, _allocate(quota, [f.size for f in families])):
            pool += [PoolPrompt(_render(family, i, rng), category) for i in rng.sample(range(family.size),
                count)]
    rng.shuffle(pool)
    return pool


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def ngram_overlaps(candidates: list[str], references: list[str], n: int = 8) -> list[int]:
    """indices of candidates sharing any lower-cased word n-gram with any reference."""
    seen = set().union(*(_ngrams(_words(ref), n) for ref in references)) if references else set()
    return [i for i, text in enumerate(candidates) if not seen.isdisjoint(_ngrams(_words(text), n))]
