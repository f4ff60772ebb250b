// The weighted phrase patterns of the prompt-injection detector, as data. Each pattern starts with one
// of its trigger words; injection-table.ts compiles the table into one trigger regex and sticky
// patterns per trigger. Weights are the evidence one match gives for its category: phrases that also
// occur in ordinary text stay below 0.5 on their own and only count in combination.

import type { InjectionType } from './types.js';

const QUALIFIER =
  '(?:previous|prior|above|earlier|preceding|foregoing|original|initial|system|existing|current|' +
  'developer|safety|given|old|former|default|preset|programmed|built-in)';
const RULES =
  '(?:instructions?|prompts?|rules|directions?|directives?|guidelines|context|commands?|constraints|' +
  'guardrails|restrictions|programming|polic(?:y|ies)|filters?|training|orders)';
export const AI = '(?:ai|assistant|llm|language\\s+model|chatbot|gpt|claude|ai\\s+assistant)';

export interface Def {
  type: InjectionType;
  weight: number;
  /** Space-separated words or markers the pattern starts with. */
  triggers: string;
  /** The rest of the pattern after the trigger alternation. */
  tail: string;
  caseSensitive?: boolean;
}

export const DEFS: readonly Def[] = [
  // ── direct: override or extract the instructions ─────────────────────────────────────────
  {
    type: 'direct',
    weight: 0.9,
    triggers: 'ignore disregard forget skip override bypass neglect',
    tail:
      '\\s+(?:(?:all|any|every|each|the|of|your|my|these|those|its|' +
      `their)\\s+){0,3}(?:${QUALIFIER}\\s+(?:(?:and|or|&)\\s+(?:following|subsequent|later|${QUALIFIER})\\s+)?){1,2}` +
      RULES,
  },
  {
    // "Ignore the above and instead …": common in ordinary replies too ("ignore the above and see
    // the corrected version"), so it only blocks together with another pattern.
    type: 'direct',
    weight: 0.6,
    triggers: 'ignore disregard forget',
    tail: '\\s+(?:all\\s+)?(?:of\\s+)?(?:the\\s+|everything\\s+)?(?:above|previous|prior)\\s*(?:,\\s*)?(?:and|then)\\s+(?:instead\\s+)?',
  },
  {
    type: 'direct',
    weight: 0.85,
    triggers: 'ignore disregard forget override bypass',
    tail:
      "\\s+(?:all\\s+)?(?:of\\s+)?(?:your|the\\s+system'?s?|its)\\s+(?:instructions|rules|guidelines|" +
      'programming|' +
      'directives|restrictions|guardrails|constraints|training|safety\\s+\\w+|content\\s+polic(?:y|ies))',
  },
  {
    type: 'direct',
    weight: 0.85,
    triggers: 'ignore disregard forget override bypass',
    tail:
      `\\s+(?:(?:all|any|the|of|these|those)\\s+){0,3}${RULES}\\s+(?:above|before|so\\s+far|` +
      '(?:you\\s+were\\s+|' +
      "you've\\s+been\\s+|you\\s+have\\s+been\\s+)?(?:given|provided)\\s+(?:to\\s+you\\s+)?(?:earlier|" +
      'before|' +
      'previously|above))',
  },
  {
    type: 'direct',
    weight: 0.85,
    triggers: 'ignore disregard forget',
    tail:
      // "previous" or "prior" followed by a word names what to ignore: only instructions and
      // their kin ("ignore all previous warnings in the build log" is prose, not an injection).
      `\\s+(?:all|everything|anything)\\s+(?:(?:of\\s+)?(?:the\\s+)?(?:above|before|(?:previous(?:ly)?|prior)(?!\\s+(?!(?:${RULES}|messages?|text|input|conversation|content|requests?|tasks?|steps?|system|settings|context|and|then|now|so|instead|ones?)\\b)\\w))|` +
      "(?:that\\s+)?you(?:'ve|\\s+have)?\\s+(?:been\\s+|were\\s+)?(?:told|taught|instructed|given)|" +
      '(?:that\\s+)?(?:came|was\\s+said)\\s+before)',
  },
  {
    type: 'direct',
    weight: 0.8,
    triggers: "do don't dont never stop",
    tail:
      '(?:\\s+not)?\\s+(?:follow(?:ing)?|obey(?:ing)?)\\s+(?:your|the|any|all)\\s+(?:(?:previous|prior|' +
      'original|' +
      'system)\\s+)?(?:instructions|rules|guidelines|programming|directives)',
  },
  {
    type: 'direct',
    weight: 0.45,
    triggers: 'new updated revised',
    tail: '\\s+(?:instructions|directives?|task|objective|rules)\\s*:',
  },
  {
    type: 'direct',
    weight: 0.7,
    triggers: 'reveal print show output repeat display tell leak dump give share',
    tail:
      '\\s+(?:me\\s+)?(?:all\\s+)?(?:of\\s+)?(?:your|the)\\s+(?:(?:full|entire|complete|exact|original|' +
      'initial|' +
      'hidden|secret|internal)\\s+)*(?:system\\s+(?:prompt|message|instructions)|initial\\s+(?:prompt|' +
      'instructions)|' +
      'instructions\\s+(?:you\\s+were\\s+given|above)|prompt\\s+above|hidden\\s+(?:prompt|instructions)|' +
      'pre-?prompt)',
  },
  {
    type: 'direct',
    weight: 0.6,
    triggers: 'what',
    tail:
      "(?:\\s+(?:is|are|was|were)|'s)\\s+your\\s+(?:system\\s+prompt|(?:initial|original|hidden|secret)\\s+" +
      '(?:instructions|prompt))',
  },
  {
    // "… tell me what your initial instructions were"
    type: 'direct',
    weight: 0.6,
    triggers: 'what',
    tail:
      '\\s+your\\s+(?:system\\s+prompt|(?:initial|original|hidden|secret|system)\\s+(?:instructions|prompt))' +
      '\\s+(?:is|are|was|were|says?|said)\\b',
  },
  { type: 'direct', weight: 0.7, triggers: 'repeat', tail: '\\s+(?:the\\s+)?(?:words|text)\\s+above' },
  // ── jailbreak: remove the model's limits ─────────────────────────────────────────────────
  { type: 'jailbreak', weight: 0.85, triggers: 'do', tail: '\\s+anything\\s+now' },
  { type: 'jailbreak', weight: 0.45, triggers: 'DAN', tail: '\\b', caseSensitive: true },
  {
    type: 'jailbreak',
    weight: 0.8,
    triggers: 'DAN',
    tail: '\\s+(?:mode|jailbreak|prompt|\\d+(?:\\.\\d+)?)\\b',
    caseSensitive: true,
  },
  {
    type: 'jailbreak',
    weight: 0.6,
    triggers: 'developer',
    tail: '\\s+mode\\s+(?:is\\s+(?:now\\s+)?)?(?:enabled|activated|active|output|on(?=\\s*(?:[.!:;,)]|$)))',
  },
  {
    type: 'jailbreak',
    weight: 0.7,
    triggers: 'uncensored unfiltered unrestricted unaligned jailbroken',
    tail: '\\s+(?:ai|mode|model|assistant|version|chatbot|llm|gpt|responses?|outputs?|answers?)\\b',
  },
  {
    type: 'jailbreak',
    weight: 0.4,
    triggers: 'jailbreak jailbroken jailbreaking jailbreaks',
    tail: '',
  },
  {
    type: 'jailbreak',
    weight: 0.35,
    triggers: 'without',
    tail:
      '\\s+(?:any\\s+)?(?:restrictions|limitations|filters|filtering|censorship|rules|guidelines|refusing|' +
      'refusals|(?:ethical|moral|safety)\\s+\\w+)',
  },
  {
    type: 'jailbreak',
    weight: 0.6,
    triggers: 'no',
    tail:
      '\\s+(?:ethical|moral|safety|content)\\s+(?:guidelines|constraints|restrictions|boundaries|limits|' +
      'filters|' +
      'policies|rules)',
  },
  {
    type: 'jailbreak',
    weight: 0.8,
    triggers: 'no not',
    tail:
      '(?:\\s+longer)?\\s+bound\\s+by\\s+(?:any\\s+|the\\s+|your\\s+)?(?:rules|guidelines|policies|' +
      'restrictions|' +
      'openai|anthropic|ethics|content\\s+polic(?:y|ies)|(?:its|your)\\s+(?:rules|programming))',
  },
  {
    type: 'jailbreak',
    weight: 0.75,
    triggers: 'pretend',
    tail:
      '\\s+(?:that\\s+)?(?:there\\s+are\\s+no|you\\s+(?:have|had)\\s+no|you\\s+(?:are|' +
      'were)\\s+(?:not\\s+bound|free|' +
      'unrestricted|uncensored))',
  },
  { type: 'jailbreak', weight: 0.4, triggers: 'stay', tail: '\\s+in\\s+character' },
  {
    type: 'jailbreak',
    weight: 0.45,
    triggers: "never don't dont do",
    tail: "(?:\\s+not)?\\s+(?:refuse|decline|say\\s+(?:no|you\\s+can(?:'|no)?t))\\b",
  },
  {
    type: 'jailbreak',
    weight: 0.45,
    triggers: 'hypothetical hypothetically fictional imaginary',
    tail: '\\s+(?:world|scenario|story|universe)\\s+(?:where|in\\s+which)\\s+(?:there\\s+are\\s+no|ai|you)',
  },
  {
    type: 'jailbreak',
    weight: 0.75,
    triggers: 'you',
    tail:
      "(?:\\s+have\\s+been|\\s+are\\s+now|'re\\s+now)\\s+(?:freed|liberated|unchained|jailbroken|" +
      'unshackled|' +
      'released\\s+from)',
  },
  {
    type: 'jailbreak',
    weight: 0.6,
    triggers: 'you',
    tail: '\\s+(?:can|will|must|shall)\\s+(?:now\\s+)?do\\s+anything',
  },
  {
    type: 'jailbreak',
    weight: 0.75,
    triggers: 'override bypass disable turn deactivate circumvent ignore',
    tail:
      '(?:\\s+off)?\\s+(?:your|all(?:\\s+(?:of\\s+)?(?:your|the))?|any)\\s+(?:safety|content|moderation|' +
      'ethical|ethics)' +
      '\\s+(?:filters?|guidelines|protocols?|restrictions|measures|checks|polic(?:y|ies)|settings)',
  },
  { type: 'jailbreak', weight: 0.4, triggers: 'opposite evil chaos god', tail: '\\s+mode\\b' },
  {
    type: 'jailbreak',
    weight: 0.7,
    triggers: 'ai assistant model chatbot llm bot',
    tail:
      '\\s+(?:with\\s+no|without\\s+(?:any\\s+)?)\\s*(?:restrictions|limits|limitations|filters|rules|' +
      'guidelines|' +
      'censorship|morals|ethics|boundaries)',
  },
  {
    type: 'jailbreak',
    weight: 0.35,
    triggers: 'with',
    tail: '\\s+no\\s+(?:restrictions|limits|limitations|filters|rules|guidelines|censorship)\\b',
  },
  {
    type: 'jailbreak',
    weight: 0.6,
    triggers: 'you',
    tail:
      '\\s+(?:had|have|has)\\s+no\\s+(?:content\\s+polic(?:y|ies)|restrictions|guidelines|rules|filters|' +
      'limits|' +
      'ethics|morals|safety\\s+\\w+)',
  },
  // ── role_hijack: replace the model's identity ────────────────────────────────────────────
  {
    type: 'role_hijack',
    weight: 0.45,
    triggers: 'you',
    tail:
      '\\s+are\\s+now\\s+(?:a|an|the|my|dan|called|named|known\\s+as|going\\s+to\\s+(?:act|pretend|be)|' +
      'acting|playing|' +
      'in\\s+\\w+\\s+mode)\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.75,
    triggers: 'you',
    tail:
      '\\s+are\\s+no\\s+longer\\s+(?:a|an|the|chatgpt|claude|gpt|gemini|bound|an?\\s+(?:ai|assistant|' +
      'language\\s+model))\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.5,
    triggers: 'you',
    tail: '\\s+are\\s+not\\s+(?:an?\\s+)?(?:ai|assistant|language\\s+model|chatbot)\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.45,
    triggers: 'from',
    tail:
      '\\s+now\\s+on,?\\s+(?:you\\s+(?:are|will\\s+(?:be|act|respond|answer|pretend|only)|must|shall)|' +
      'your\\s+(?:name|role)\\s+is|act\\s+as)\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.75,
    triggers: 'act behave respond answer',
    tail:
      '\\s+as\\s+(?:if\\s+you\\s+(?:are|were)\\s+|though\\s+you\\s+(?:are|' +
      'were)\\s+)?(?:an?\\s+)?(?:unrestricted|' +
      'unfiltered|uncensored|evil|malicious|rogue|jailbroken|amoral|unethical|dan\\b|different\\s+(?:ai|' +
      'model|' +
      'assistant)|ai\\s+(?:with|without)\\s+no)',
  },
  { type: 'role_hijack', weight: 0.15, triggers: 'act', tail: '\\s+as\\s+(?:an?|my|the)\\s' },
  {
    type: 'role_hijack',
    weight: 0.45,
    triggers: 'pretend',
    tail: "\\s+(?:to\\s+be|you\\s+are|you're|that\\s+you\\s+are)\\b",
  },
  {
    type: 'role_hijack',
    weight: 0.35,
    triggers: 'roleplay role-play role',
    tail: '(?:\\s+play)?\\s+as\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.7,
    triggers: 'your',
    tail:
      '\\s+new\\s+(?:role|name|identity|persona|purpose|instructions|task|objective|goal)\\s+(?:is|are|' +
      'will\\s+be)',
  },
  {
    type: 'role_hijack',
    weight: 0.4,
    triggers: "i i'm",
    tail:
      '(?:\\s+am)?\\s+(?:your|the)\\s+(?:developer|creator|administrator|admin|owner|programmer|operator|' +
      'system\\s+administrator)\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.6,
    triggers: 'admin administrator developer root sudo maintenance',
    tail: '\\s+(?:override|access\\s+granted)\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.4,
    triggers: 'assume',
    tail: '\\s+the\\s+(?:role|persona|identity|character)\\s+of',
  },
  {
    type: 'role_hijack',
    weight: 0.75,
    triggers: 'switch change',
    tail:
      '\\s+(?:to|into)\\s+(?:your\\s+)?(?:evil|unrestricted|unfiltered|uncensored|jailbroken|dan)\\s+' +
      '(?:mode|persona|self)',
  },
  {
    type: 'role_hijack',
    weight: 0.4,
    triggers: 'you',
    tail: '\\s+(?:will|must|shall)\\s+(?:now\\s+)?(?:respond|answer|reply|act|speak)\\s+(?:only\\s+)?as\\b',
  },
  {
    type: 'role_hijack',
    weight: 0.55,
    triggers: 'you',
    tail:
      '\\s+(?:must|will|shall)\\s+(?:now\\s+)?(?:obey|comply\\s+with)\\s+(?:me|my|only\\s+me|every|' +
      'all)\\b',
  },
  // ── context_manipulation: fake turn, system or end-of-context markers ────────────────────
  {
    type: 'context_manipulation',
    weight: 0.65,
    triggers: '</ <',
    tail: '\\s*(?:system|instructions?|sys|system_prompt|admin|im_start|im_end)\\s*>',
  },
  {
    type: 'context_manipulation',
    weight: 0.85,
    triggers: '<|',
    tail: '(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\\|>',
  },
  {
    type: 'context_manipulation',
    weight: 0.45,
    triggers: '[',
    tail: '(?:SYSTEM|SYS|ADMIN|SYSTEM (?:MESSAGE|PROMPT|NOTE|OVERRIDE))\\]',
    caseSensitive: true,
  },
  { type: 'context_manipulation', weight: 0.7, triggers: '[', tail: '/?inst\\]' },
  { type: 'context_manipulation', weight: 0.8, triggers: '<<', tail: '\\s*/?sys\\s*>>' },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: '## ###',
    tail: '#*\\s*(?:system(?:\\s+(?:prompt|message))?|new\\s+instructions|admin(?:\\s+instructions)?)\\s*:',
  },
  {
    type: 'context_manipulation',
    weight: 0.7,
    triggers: '## ### --- === *** [ <',
    tail:
      '[#=*-]*\\s*end\\s+of\\s+(?:the\\s+)?(?:conversation|context(?:\\s+window)?|system\\s+prompt|prompt|' +
      'instructions|user\\s+(?:input|message)|chat(?:\\s+history)?|document)\\b',
  },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: 'END',
    tail:
      ' OF (?:THE )?(?:CONVERSATION|CONTEXT|SYSTEM PROMPT|PROMPT|INSTRUCTIONS|USER INPUT|CHAT HISTORY|' +
      'DOCUMENT)\\b',
    caseSensitive: true,
  },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: 'begin start',
    tail:
      '\\s+(?:of\\s+)?(?:(?:the|a)\\s+)?(?:new\\s+)?(?:system\\s+(?:prompt|message)|' +
      'admin\\s+instructions|new\\s+instructions)',
  },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: 'system',
    tail: '\\s+(?:prompt|message|instructions?)\\s+(?:ends|begins|starts|updated|override|overridden)\\b',
  },
  { type: 'context_manipulation', weight: 0.6, triggers: 'system', tail: '\\s+override\\b' },
  {
    type: 'context_manipulation',
    weight: 0.45,
    triggers: 'system admin',
    tail: '\\s*(?:override|notice|message|alert|instruction)\\s*:',
  },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: 'conversation context chat session',
    tail: '\\s+(?:above|so\\s+far)\\s+(?:is|was)\\s+(?:over|finished|complete|a\\s+test|fake|reset)',
  },
  {
    type: 'context_manipulation',
    weight: 0.45,
    triggers: 'reset clear wipe erase',
    tail: '\\s+(?:your|all)\\s+(?:context|memory|instructions|conversation(?:\\s+history)?)',
  },
  {
    type: 'context_manipulation',
    weight: 0.55,
    triggers: 'system',
    tail: '\\s*:\\s*you\\s+(?:are|must|will|should|have)\\b',
  },
  {
    type: 'context_manipulation',
    weight: 0.6,
    triggers: '[',
    tail: '\\s*(?:system|admin|developer)\\s+(?:message|prompt|note|override|instructions?)\\s*\\]',
  },
  // ── indirect: instructions planted in retrieved or tool content ──────────────────────────
  {
    type: 'indirect',
    weight: 0.8,
    triggers: 'when if once after',
    tail:
      `\\s+(?:an?\\s+|the\\s+|any\\s+)?(?:${AI}|model|agent|bot)s?(?:\\s+(?:model|assistant|` +
      'agent)s?)?\\s+(?:reads?|sees?|process(?:es)?|encounters?|' +
      'summari[sz]es?|parses?|finds?|is\\s+(?:reading|processing|summari[sz]ing|asked))\\s+(?:this|these)',
  },
  {
    type: 'indirect',
    weight: 0.7,
    triggers: 'ai assistant llm model agent chatbot bot gpt claude',
    tail: 's?\\s+(?:reading|processing|summari[sz]ing|parsing|seeing|browsing)\\s+(?:this|these)\\b',
  },
  {
    type: 'indirect',
    weight: 0.45,
    triggers: 'when if once',
    tail:
      '\\s+you\\s+(?:read|see|process|encounter|summari[sz]e|parse|find|are\\s+(?:reading|processing|' +
      'summari[sz]ing|' +
      'asked\\s+to\\s+summari[sz]e))\\s+this\\s+(?:document|page|email|message|text|file|content|website|' +
      'note|' +
      'review|comment)',
  },
  {
    type: 'indirect',
    weight: 0.7,
    triggers: 'ai assistant llm chatbot language',
    tail:
      '(?:\\s+model)?(?:\\s+assistant)?\\s*[:,]\\s*(?:please\\s+)?(?:ignore|disregard|you\\s+must|instead|' +
      'forward\\s+(?:all|the|this)|delete\\s+(?:all|the)|execute|when\\s+you\\s+(?:read|see|process|' +
      'summari[sz]e|' +
      'parse|encounter|find))\\b',
  },
  {
    type: 'indirect',
    weight: 0.6,
    triggers: 'note message instruction instructions attention important notice',
    tail: `\\s+(?:to|for)\\s+(?:the\\s+|any\\s+|all\\s+)?(?:${AI}|model|gpt|claude)s?\\b`,
  },
  { type: 'indirect', weight: 0.55, triggers: 'attention', tail: `\\s*[,:]?\\s*${AI}s?\\b` },
  {
    type: 'indirect',
    weight: 0.65,
    triggers: "do don't dont never",
    tail:
      '(?:\\s+not)?\\s+(?:tell|inform|mention\\s+(?:this\\s+)?to|' +
      'reveal\\s+(?:this\\s+)?to)\\s+(?:the\\s+)?user',
  },
  {
    type: 'indirect',
    weight: 0.65,
    triggers: 'secretly silently quietly covertly without',
    tail:
      '(?:\\s+(?:telling|informing|notifying|alerting)\\s+(?:the\\s+)?user)?\\s*,?\\s*(?:send|forward|' +
      'email|' +
      'exfiltrate|upload|transfer|transmit|post)\\b',
  },
  {
    type: 'indirect',
    weight: 0.75,
    triggers: 'send forward email post upload exfiltrate transmit leak copy',
    tail:
      '\\s+(?:(?:all|the|this|any|your)\\s+)*(?:(?:(?:previous|entire|full)\\s+)?(?:conversation|' +
      'chat\\s+history|' +
      "chat\\s+log|system\\s+prompt|context)|user'?s?\\s+(?:data|emails?|messages|credentials|passwords?|" +
      'files|' +
      'contacts|api\\s+keys?|personal\\s+(?:data|information))|api\\s+keys?|secrets|credentials|passwords|' +
      'tokens|' +
      'cookies|session\\s+tokens?)\\s+to\\s+(?:https?://|\\S+@|this\\s+(?:url|address|endpoint|server)|' +
      'the\\s+' +
      'following\\s+(?:url|address|endpoint))',
  },
  {
    type: 'indirect',
    weight: 0.4,
    triggers: 'this',
    tail:
      '\\s+(?:is\\s+an?\\s+)?(?:message|instruction|note)\\s+(?:from|for)\\s+(?:the\\s+)?(?:system|' +
      'developer|admin|ai)\\b',
  },
];
